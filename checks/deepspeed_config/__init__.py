"""DeepSpeed config checks (``DS1xx``): what ``deepspeed.initialize`` will refuse, and what it silently ignores,
found statically, without importing torch or DeepSpeed.

The checks mirror DeepSpeed 0.19.8 as read from its source (each rule's ``source`` names the file) and from a key
schema generated from the installed DeepSpeed's own pydantic models (``dsdoctor/schemas/generate.py``):

* batch math: ``deepspeed/runtime/config.py`` ``_set_batch_related_parameters`` and ``_batch_assertion``;
* keys: pydantic sub-configs with ``extra="forbid"`` (``zero_optimization``, ``fp16``, ``bf16``, ...) refuse
  unknown keys, while unknown top-level keys and keys of the ``get_scalar_param`` sections are ignored;
  ``DeepSpeedConfigModel.__init__`` (``deepspeed/runtime/config_utils.py``) drops ``"auto"`` values, so they
  become the default;
* optimizer and scheduler: ``deepspeed/runtime/engine.py`` ``_do_sanity_check``, ``_configure_optimizer``,
  ``_configure_basic_optimizer``, ``_do_optimizer_sanity_check``, ``_scheduler_from_config`` and
  ``deepspeed/runtime/lr_schedules.py``.

The entry point is :func:`check_config`; the Trainer's side (``HF2xx``) is in ``checks/hf_trainer.py``.

The package is split by concern: ``rules`` (the DS1xx declarations), ``schema``, ``values`` (path and value helpers),
``result`` (context and result), ``fix`` (the --fix edits), ``keys``, ``autos``, ``batch``, ``precision``,
``optimizer``, ``scheduler``, ``zero`` and ``check`` (the entry point). Everything public is re-exported here.
"""

from __future__ import annotations

from .autos import check_autos_engine
from .batch import batch_proposals, check_batch, check_world_size, consistent_world_sizes, derive_batch, valid_world_sizes
from .check import check_config, effective_config
from .fix import TRAINING_ASPECTS, Change, apply_changes, mark_training_changes, training_of
from .keys import MAX_UNKNOWN_SHOWN, check_keys, check_syntax
from .optimizer import check_optimizer, optimizer_class
from .precision import check_precision, precision_of
from .result import CheckContext, CheckResult
from .rules import (DS101, DS102, DS103, DS104, DS105, DS106, DS110, DS111, DS112, DS113, DS114, DS116, DS117, DS118,
                    DS120, DS121, DS122, DS123, DS124, DS125, DS126, DS127, DS128, DS129, DS130, DS131, DS132,
                    DS133, DS134, DS135, DS136, DS137, DS138, DS139, DS140, DS141, DS142, DS143, DS144, DS145, DS146, DS199)
from .scheduler import check_scheduler
from .schema import SCHEMA_DIR, installed_version, load_schema
from .values import (BATCH_KEYS, EXTRA_TOP_LEVEL, MISSING, as_bool, auto_paths, delete_path, get_path, is_auto,
                     is_number, positive_int, set_path, show, suggest)
from .zero import check_zero, offload_device, zero_stage

__all__ = [
    "BATCH_KEYS", "EXTRA_TOP_LEVEL", "MAX_UNKNOWN_SHOWN", "MISSING", "SCHEMA_DIR", "TRAINING_ASPECTS",
    "apply_changes", "as_bool", "batch_proposals", "auto_paths", "Change", "check_autos_engine", "check_batch", "check_config",
    "check_keys", "check_optimizer", "check_precision", "check_scheduler", "check_syntax", "check_world_size",
    "check_zero", "CheckContext", "CheckResult", "consistent_world_sizes", "delete_path", "derive_batch",
    "effective_config", "get_path", "installed_version", "is_auto", "is_number", "load_schema",
    "mark_training_changes", "offload_device", "optimizer_class", "positive_int", "precision_of", "set_path", "show",
    "suggest", "training_of", "valid_world_sizes", "zero_stage",
    "DS101", "DS102", "DS103", "DS104", "DS105", "DS106", "DS110", "DS111", "DS112", "DS113", "DS114", "DS116",
    "DS117", "DS118", "DS120", "DS121", "DS122", "DS123", "DS124", "DS125", "DS126", "DS127", "DS128", "DS129",
    "DS130", "DS131", "DS132", "DS133", "DS134", "DS135", "DS136", "DS137", "DS138", "DS139", "DS140", "DS141",
    "DS142", "DS143", "DS144", "DS145", "DS146", "DS199",
]
