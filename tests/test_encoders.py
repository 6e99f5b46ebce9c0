"""The shipped encoder table (dsdoctor/models/encoders.json) is the installed transformers' own."""

from __future__ import annotations

import pytest

from dsdoctor.models import encoders


def test_shipped_table_is_the_installed_transformers():
    pytest.importorskip("transformers")
    derived = encoders.derive()
    shipped = encoders.shipped()
    # the table, not the version string: a transformers release that adds no encoder needs no new table (CI installs
    # the newest release); one that adds or renames one fails here
    assert shipped["masked_lm"] == derived["masked_lm"], (
        f"the encoder table of transformers {shipped.get('transformers')} is not that of the installed "
        f"{derived['transformers']}: python -m dsdoctor.models.encoders --write")
    assert shipped["masked_lm"]["bert"] == "BertForMaskedLM" and "qwen3" not in shipped["masked_lm"]


@pytest.mark.parametrize("config, expected", [
    ({"model_type": "roberta"}, "RobertaForMaskedLM"),
    ({"model_type": "roberta", "is_decoder": True}, None),
    ({"model_type": "llama"}, None),
    ({"model_type": 3}, None),
    ({}, None),
])
def test_encoder_class(config, expected):
    assert encoders.encoder_class(config) == expected
