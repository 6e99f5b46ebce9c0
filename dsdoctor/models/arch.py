"""The architecture facts the memory estimate and the config checks need: :class:`Arch` and its linears."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Linear:
    """One ``nn.Linear`` of a decoder layer: ``in_features``, ``out_features``, whether it has a bias."""

    name: str
    in_features: int
    out_features: int
    bias: bool = False

    @property
    def params(self) -> int:
        return self.in_features * self.out_features + (self.out_features if self.bias else 0)


@dataclass(frozen=True)
class Arch:
    """A decoder-only architecture, normalised from a ``config.json``.

    Sizes are element counts. ``kv_dim`` is the width of the key (and of the value) projection: ``hidden_size``
    without grouped-query attention, ``num_key_value_heads * head_dim`` with it. ``mlp_gated`` is True for
    SwiGLU MLPs (three matrices of ``intermediate_size``), False for the two-matrix GeLU MLP.
    """

    name: str
    source: str
    model_type: str
    family: str
    hidden_size: int
    num_layers: int
    num_heads: int
    kv_dim: int
    intermediate_size: int
    vocab_size: int
    tied: bool
    dtype: str
    max_positions: int | None
    linears: tuple[Linear, ...]
    norm_params_per_layer: int
    final_norm_params: int
    lm_head_bias: bool = False
    mlp_gated: bool = True
    layer_norm: bool = False  # LayerNorm (mean and variance) instead of RMSNorm
    config: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def layer_params(self) -> int:
        """Parameters of one decoder layer: its linears plus its norms."""
        return sum(lin.params for lin in self.linears) + self.norm_params_per_layer

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """The output projection's own parameters: its weight unless tied to the input embedding, and its bias
        (GPT-J's, which tying does not share)."""
        return (0 if self.tied else self.vocab_size * self.hidden_size) + (self.vocab_size if self.lm_head_bias else 0)

    @property
    def total_params(self) -> int:
        """Every parameter once (a tied output projection shares the embedding's), as
        ``sum(p.numel() for p in model.parameters())`` counts them."""
        return (self.num_layers * self.layer_params + self.embedding_params + self.lm_head_params
                + self.final_norm_params)

    @property
    def largest_layer_params(self) -> int:
        """The largest single module's parameters (DeepSpeed's ZeRO-3 estimator takes it): the embedding, or the
        output projection, or the largest linear."""
        return max([self.embedding_params, self.lm_head_params] + [lin.params for lin in self.linears])

    def linear(self, name: str) -> Linear | None:
        return next((lin for lin in self.linears if lin.name == name), None)


#: Upper bounds on config.json sizes: far above any real model (the largest dense LLMs have hidden sizes near 25k,
#: fewer than 200 layers and vocabularies below 300k); a value past them is a broken config, not a model.
