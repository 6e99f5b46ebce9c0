"""The architecture facts the memory estimate and the config checks need: :class:`Arch` and its linears."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Linear:
    """One ``nn.Linear`` of a decoder layer: ``in_features``, ``out_features``, whether it has a bias, and its role
    in the layer when it was read off the model (:mod:`dsdoctor.models.structure`: ``attn_in``, ``attn_out``,
    ``mlp_in``, ``mlp_out``, ``expert``, ``router``, ``inner``; "" for the analytic families, whose order gives it)."""

    name: str
    in_features: int
    out_features: int
    bias: bool = False
    role: str = ""
    reads: str = ""  # the norm whose output it reads (traced on the meta device), "" when another tensor

    @property
    def params(self) -> int:
        return self.in_features * self.out_features + (self.out_features if self.bias else 0)


@dataclass(frozen=True)
class Arch:
    """A decoder-only architecture, normalised from a ``config.json``.

    Sizes are element counts. ``kv_dim`` is the width of the key (and of the value) projection: ``hidden_size``
    without grouped-query attention, ``num_key_value_heads * head_dim`` with it. ``mlp_gated`` is True for
    SwiGLU MLPs (three matrices of ``intermediate_size``), False for the two-matrix GeLU MLP.

    The fields after ``config`` are filled for architectures read off the model transformers builds
    (:func:`dsdoctor.models.structure.arch_from_structure`), and keep their defaults for the analytic families:

    - ``q_dim``: heads x head size, when it is not the hidden size (Gemma-2-9B: 16 x 256 = 4096 on a 3584 model);
    - ``norm_widths``: the width of the tensor each norm of a layer normalises (Gemma-2: four of the hidden size;
      Qwen3: two of the hidden size, plus the query and key widths of its per-head norms);
    - ``experts``, ``top_k``, ``expert_intermediate``, ``expert_gated``: a mixture-of-experts MLP (E experts, k per
      token, each of width I); ``moe_params_per_layer``: the experts' and router's weights of one layer;
      ``intermediate_size`` is then the width of the dense (shared-expert) MLP beside them, 0 when none;
    - ``exact_total``, ``embedding_override``, ``lm_head_override``, ``layer_params_each``: the counts of the model
      as built (``sum(p.numel())``), which replace the formulas; ``layer_kinds``: (layers, linears, parameters) of each
      kind of decoder layer (DeepSeek's dense first layers beside the MoE ones), and the LoRA parameters peft adds at
      rank 1 to each module of one such layer ({module path: parameters}, or None);
    - ``eager_attention``: the model class does not support SDPA (``_supports_sdpa`` False), so transformers runs
      eager attention, which keeps the s x s probabilities; ``attn_softcap`` / ``final_softcap``: Gemma-2's tanh
      softcapping of attention scores / of the logits;
    - ``prefix_token_dim``: P-Tuning's prefix width per layer as peft computes it; ``lora_default``: peft's default
      LoRA targets for the model type;
    - ``unmodeled``: what the activation formulas do not model for this structure, said in the report.
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
    q_dim: int | None = None
    norm_widths: tuple[int, ...] | None = None
    experts: int = 0
    top_k: int = 0
    expert_intermediate: int = 0
    expert_gated: bool = True
    moe_params_per_layer: int = 0
    expert_params_total: int = 0  # every layer's expert weights: a token runs top_k / experts of them
    exact_total: int | None = None
    embedding_override: int | None = None
    lm_head_override: int | None = None
    layer_params_each: tuple[int, ...] | None = None
    layer_kinds: tuple | None = None  # ((layers, linears, parameters, ((module, LoRA params at rank 1), ...) | None), ...)
    eager_attention: bool = False
    attn_softcap: bool = False
    final_softcap: bool = False
    prefix_token_dim: int | None = None
    lora_default: tuple[str, ...] = ()
    unmodeled: tuple[str, ...] = ()

    @property
    def attention_width(self) -> int:
        """Heads x head size: the width of the query and of the attention output."""
        return self.q_dim if self.q_dim is not None else self.num_heads * (self.hidden_size // self.num_heads)

    @property
    def layer_params(self) -> int:
        """Parameters of one decoder layer (the largest kind, when layers differ): its linears plus its norms, plus
        its experts and router."""
        if self.layer_params_each:
            return max(self.layer_params_each)
        return sum(lin.params for lin in self.linears) + self.norm_params_per_layer + self.moe_params_per_layer

    @property
    def embedding_params(self) -> int:
        return self.embedding_override if self.embedding_override is not None else self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """The output projection's own parameters: its weight unless tied to the input embedding, and its bias
        (GPT-J's, which tying does not share)."""
        if self.lm_head_override is not None:
            return self.lm_head_override
        return (0 if self.tied else self.vocab_size * self.hidden_size) + (self.vocab_size if self.lm_head_bias else 0)

    @property
    def total_params(self) -> int:
        """Every parameter once (a tied output projection shares the embedding's), as
        ``sum(p.numel() for p in model.parameters())`` counts them."""
        if self.exact_total is not None:
            return self.exact_total
        return (self.num_layers * self.layer_params + self.embedding_params + self.lm_head_params
                + self.final_norm_params)

    @property
    def largest_layer_params(self) -> int:
        """The largest single module's parameters (DeepSpeed's ZeRO-3 estimator takes it, and ZeRO-3 gathers a
        module's parameters at once): the embedding, the output projection, the largest linear, or a layer's fused
        experts."""
        return max([self.embedding_params, self.lm_head_params, self.moe_params_per_layer]
                   + [lin.params for lin in self.linears])

    @property
    def active_params(self) -> int:
        """Parameters a token runs through: all but the experts it is not routed to (top_k of E experts in each
        mixture-of-experts layer: Qwen3-30B-A3B's 30.5 B hold about 3.3 B active). The FLOPs of a step follow these,
        the memory of the weights all of them."""
        if not self.experts or not self.top_k:
            return self.total_params
        return self.total_params - int(self.expert_params_total * (1 - self.top_k / self.experts))

    @property
    def moe(self) -> bool:
        return self.experts > 0

    def linear(self, name: str) -> Linear | None:
        return next((lin for lin in self.linears if lin.name == name), None)
