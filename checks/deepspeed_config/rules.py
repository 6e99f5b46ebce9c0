"""The DS1xx rules: each one's ID, default severity, what, why, fix and the DeepSpeed source it mirrors.

Declared here in one place (the checks that raise them import them), as ruff keeps one doc per rule."""

from __future__ import annotations

from dsdoctor.rules import rule

_DS = "deepspeed/runtime/config.py"
_ENGINE = "deepspeed/runtime/engine.py"

DS101 = rule(
    "DS101", "error", '"auto" outside the HF Trainer',
    what='A ds_config value is "auto" but the config goes to deepspeed.initialize directly (your own engine '
         "loop, the reference trainer), where nothing fills it.",
    why='Only transformers\' Trainer replaces "auto" (transformers/integrations/deepspeed.py '
        "trainer_config_process). DeepSpeed itself fails after the model has loaded with a TypeError such as "
        "\"'>' not supported between instances of 'str' and 'int'\".",
    fix='Replace each "auto" with a number: the micro batch, gradient accumulation steps, learning rate, '
        "warmup and total steps your loop uses.",
    source="deepspeed/runtime/config.py _set_batch_related_parameters; transformers/integrations/deepspeed.py",
    example='"train_micro_batch_size_per_gpu": "auto" with deepspeed --num_gpus 2 train.py')
DS102 = rule(
    "DS102", "error", "train_batch_size != micro batch x gradient accumulation x world size",
    what="The batch triple does not satisfy train_batch_size = train_micro_batch_size_per_gpu x "
         "gradient_accumulation_steps x world size for the world size it will run on.",
    why='DeepSpeed asserts it at initialize: "Check batch related parameters. train_batch_size is not equal to '
        'micro_batch_per_gpu * gradient_acc_step * world_size". A config written for 8 GPUs and launched on 7 '
        "fails this way.",
    fix="Set one of the triples shown (each one DeepSpeed accepts on this world size; the global batch kept when "
        "the world size divides it), or drop train_batch_size and let DeepSpeed derive it when "
        "train_micro_batch_size_per_gpu is in the file (without either DeepSpeed refuses it; under the HF "
        'Trainer: "auto").',
    source=f"{_DS} _set_batch_related_parameters, _batch_assertion",
    example='{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1} on 4 GPUs')
DS103 = rule(
    "DS103", "error", "batch value is not a positive integer",
    what="train_batch_size, train_micro_batch_size_per_gpu or gradient_accumulation_steps is zero, negative, "
         "fractional, a string or a boolean, or DeepSpeed's integer division derives 0 from it.",
    why='DeepSpeed asserts "... has to be greater than 0", or fails with a TypeError comparing a string; a '
        "fractional batch breaks the data loader.",
    fix="Use positive integers (JSON numbers without quotes).",
    source=f"{_DS} _batch_assertion")
DS104 = rule(
    "DS104", "error", "no batch size given",
    what="Neither train_batch_size nor train_micro_batch_size_per_gpu is set.",
    why='DeepSpeed asserts "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided".',
    fix="Set train_micro_batch_size_per_gpu (and gradient_accumulation_steps); DeepSpeed derives the rest.",
    source=f"{_DS} _set_batch_related_parameters")
DS105 = rule(
    "DS105", "info", "train_batch_size pins the world size",
    what="An explicit train_batch_size holds for this world size only; the same file on another GPU count fails.",
    why="DeepSpeed derives gradient accumulation or the micro batch from train_batch_size by integer division "
        "per world size, then asserts the product.",
    fix="Leave train_batch_size out and give train_micro_batch_size_per_gpu and gradient_accumulation_steps.",
    source=f"{_DS} _set_batch_related_parameters")
DS106 = rule(
    "DS106", "warning", "world size assumed",
    what="Nothing gave the world size (no --world-size, no WORLD_SIZE from a launcher, no visible GPU), so the batch "
         "was checked for an assumed world size.",
    why="DeepSpeed derives and asserts the batch triple per world size: a file written for the 4-GPU run checked on "
        "a GPU-less preparation box for world size 1 looks wrong, and rewriting its triple for 1 breaks the real run. "
        "The evidence names the world sizes the file's batch values hold on.",
    fix="Give --world-size N (all GPUs of the run, every node), or run check under the launcher (WORLD_SIZE).",
    source=f"{_DS} _set_batch_related_parameters, _batch_assertion",
    example="dsdoctor check ds.json on a laptop, for deepspeed --num_gpus 4 train.py")
DS110 = rule(
    "DS110", "error", "fp16 and bf16 both enabled",
    what="fp16.enabled and bf16.enabled are both true.",
    why='DeepSpeed asserts "bfloat16 and fp16 modes cannot be simultaneously enabled".',
    fix="Keep one: bf16 on compute capability 8.0 or newer (A100, H100, RTX 30xx/40xx), fp16 on V100/T4.",
    source=f"{_DS} _initialize_params")
DS111 = rule(
    "DS111", "error", "bf16 on a GPU without bf16",
    what="bf16 is enabled, in the ds_config or (under the HF Trainer) by TrainingArguments bf16 / bf16_full_eval, "
         "but the GPU's compute capability is below 8.0 (V100, T4, RTX 20xx); or TrainingArguments tf32 there.",
    why="The GPU has no bf16 arithmetic. Where torch.cuda.is_bf16_supported() is false, DeepSpeed raises \"Type "
        "bf16 is not supported on your device\" and TrainingArguments \"Your setup doesn't support bf16/gpu\"; where "
        "torch emulates bf16 (its default) the run starts and is several times slower than fp16 without tensor "
        "cores, and kernels built for 8.0+ refuse it. tf32 below 8.0 is refused by TrainingArguments (\"--tf32 "
        "requires Ampere or a newer GPU arch\").",
    fix='Use "fp16": {"enabled": true} (with dynamic loss scaling) and drop bf16 in the config; under the HF '
        'Trainer set bf16: false, fp16: true in TrainingArguments and "auto" in the config.',
    source=f"{_ENGINE} _do_sanity_check (accelerator.is_bf16_supported); transformers/training_args.py "
           "__post_init__ (is_torch_bf16_gpu_available, is_torch_tf32_available); torch/cuda/__init__.py "
           "is_bf16_supported")
DS112 = rule(
    "DS112", "warning", "fp16 on a GPU below compute capability 7.0",
    what="fp16 is enabled on a GPU without tensor cores (Pascal P100/P40, compute capability below 7.0).",
    why="fp16 runs there without tensor cores: often slower than fp32, with the overflow risk of fp16.",
    fix="Train in fp32 (drop fp16) on this GPU, or use a GPU of compute capability 7.0 or newer.",
    source="NVIDIA CUDA compute capabilities (tensor cores from 7.0)")
DS113 = rule(
    "DS113", "warning", "training precision differs from the model's weights",
    what="fp16 is enabled for a model whose weights are bf16 (or bf16 for an fp16 model).",
    why="Weights trained in bf16 hold values beyond fp16's range (65504): activations overflow to inf, the "
        'loss becomes NaN or the loss scale falls to its minimum ("Current loss scale already at minimum"). '
        "bf16 on an fp16 model works but drops 3 bits of mantissa.",
    fix="Match the config to the weights: bf16 for a bf16 model (on compute capability 8.0+), fp16 for an "
        "fp16 one.",
    source="the model's config.json torch_dtype; IEEE fp16/bf16 ranges")
DS114 = rule(
    "DS114", "warning", "fp16 loss-scale settings likely to overflow",
    what="fp16 with a static loss scale, a high initial scale, a short loss_scale_window or a high "
         "min_loss_scale.",
    why="A static scale never backs off, so overflowing steps are skipped forever; a short window raises the "
        "scale again too soon; a high minimum makes DeepSpeed exit with \"Current loss scale already at "
        'minimum - cannot decrease scale anymore".',
    fix='Use dynamic scaling with the defaults ("loss_scale": 0, "initial_scale_power": 16, '
        '"loss_scale_window": 1000, "min_loss_scale": 1), lower initial_scale_power (12) if it still '
        "overflows, or switch to bf16 on compute capability 8.0+.",
    source="deepspeed/runtime/fp16/loss_scaler.py DynamicLossScaler")
DS116 = rule(
    "DS116", "warning", "warmup_min_lr above warmup_max_lr",
    what="scheduler.params.warmup_min_lr is larger than warmup_max_lr.",
    why="The warmup then lowers the learning rate instead of raising it; DeepSpeed does not check.",
    fix="Swap them: warmup_min_lr is where warmup starts (often 0), warmup_max_lr the peak.",
    source="deepspeed/runtime/lr_schedules.py WarmupLR")
DS118 = rule(
    "DS118", "error", "optimizer parameter the optimizer does not take",
    what="optimizer.params has a key that the optimizer class DeepSpeed builds does not accept (a misspelling "
         "such as weight_decy, or a parameter of another optimizer).",
    why="DeepSpeed calls the class with **params: TypeError \"__init__() got an unexpected keyword argument\" at "
        "initialize.",
    fix="Use the parameter names the class takes (shown in the evidence).",
    source="deepspeed/runtime/engine.py _configure_basic_optimizer, get_optimizer_configuration")
DS117 = rule(
    "DS117", "warning", "optimizer block ignored: a client optimizer is passed",
    what="The config has an optimizer block, but your script passes its own optimizer to deepspeed.initialize.",
    why="DeepSpeed uses the client optimizer and does not build or check the one in the config: its "
        "learning rate and betas have no effect.",
    fix="Remove the optimizer block, or stop passing optimizer= to deepspeed.initialize.",
    source=f"{_ENGINE} _configure_optimizer")
DS120 = rule(
    "DS120", "error", "no optimizer",
    what="The config has no optimizer block and the script passes no optimizer to deepspeed.initialize.",
    why='DeepSpeed fails: ZeRO 1/2 at initialize with "zero stage N requires an optimizer", ZeRO 3 at the '
        "first step (\"'DeepSpeedZeRoOffload' object has no attribute 'set_gradient_accumulation_boundary'\"), "
        'ZeRO 0 at backward ("must provide optimizer during init in order to use backward").',
    fix='Add an optimizer block, e.g. "optimizer": {"type": "AdamW", "params": {"lr": 2e-5, '
        '"weight_decay": 0.0}}, or pass optimizer= to deepspeed.initialize (then say --client-optimizer).',
    source=f"{_ENGINE} _configure_zero_optimizer",
    example="the DeepSpeed ChatGLM tutorial's ds_config with its own train script")
DS121 = rule(
    "DS121", "error", "ZeRO-Offload with a client optimizer",
    what="offload_optimizer (or cpu_offload) is on and the optimizer comes from your code or the HF Trainer, "
         "not from the config.",
    why='DeepSpeed raises ZeRORuntimeException "You are using ZeRO-Offload with a client provided optimizer" '
        "unless zero_force_ds_cpu_optimizer is false.",
    fix='Add "optimizer": {"type": "AdamW", "params": {...}} so DeepSpeed builds DeepSpeedCPUAdam, or set '
        '"zero_force_ds_cpu_optimizer": false (slow: the client optimizer steps on the CPU in Python).',
    source=f"{_ENGINE} _configure_optimizer",
    example="ChatGLM-6B ptuning with offload_optimizer and the Trainer's AdamW")
DS122 = rule(
    "DS122", "error", "unknown optimizer type",
    what="optimizer.type is neither a DeepSpeed optimizer nor a torch.optim class.",
    why='DeepSpeed asserts "<type> is not a supported DeepSpeed Optimizer" at initialize.',
    fix='Use "Adam" or "AdamW" (DeepSpeed picks FusedAdam on the GPU and DeepSpeedCPUAdam with offload), '
        '"Lamb", "Lion", "Adagrad", or a torch.optim class name spelled exactly.',
    source=f"{_ENGINE} _do_sanity_check, _is_supported_optimizer")
DS123 = rule(
    "DS123", "error", "optimizer ZeRO has not tested",
    what="ZeRO is on and the optimizer is not one ZeRO supports (e.g. SGD, Lamb, RMSprop).",
    why='DeepSpeed asserts "You are using an untested ZeRO Optimizer. Please add '
        '<"zero_allow_untested_optimizer": true>".',
    fix='Use Adam/AdamW/Adagrad/Lion, or add "zero_allow_untested_optimizer": true and verify convergence.',
    source="deepspeed/runtime/zero/utils.py ZERO_SUPPORTED_OPTIMIZERS; engine.py _do_optimizer_sanity_check")
DS124 = rule(
    "DS124", "error", "unknown scheduler type",
    what="scheduler.type is neither a DeepSpeed scheduler nor a torch.optim.lr_scheduler class.",
    why='DeepSpeed asserts "DeepSpeed does not recognize LR scheduler <type>".',
    fix="Use WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle or LRRangeTest (spelled exactly).",
    source=f"{_ENGINE} _scheduler_from_config; deepspeed/runtime/lr_schedules.py")
DS125 = rule(
    "DS125", "error", "scheduler without a required parameter",
    what="WarmupDecayLR / WarmupCosineLR without total_num_steps (OneCycle without cycle_min_lr/cycle_max_lr).",
    why="DeepSpeed fails at initialize with TypeError: __init__() missing 1 required positional argument: "
        "'total_num_steps'.",
    fix="Add total_num_steps = optimizer steps of the whole run (samples x epochs / train_batch_size); "
        'under the HF Trainer "auto".',
    source="deepspeed/runtime/lr_schedules.py")
DS126 = rule(
    "DS126", "error", "unknown scheduler parameter",
    what="scheduler.params has a key the scheduler's constructor does not take.",
    why="DeepSpeed calls scheduler(optimizer, **params): TypeError \"got an unexpected keyword argument\".",
    fix="Use the parameter names of the scheduler (shown in the evidence).",
    source="deepspeed/runtime/lr_schedules.py")
DS127 = rule(
    "DS127", "error", "warmup_num_steps not a positive integer, or not below total_num_steps",
    what="scheduler.params.warmup_num_steps is 0, negative, fractional or a string; or it is at least "
         "total_num_steps.",
    why='DeepSpeed 0.19.6+ raises "warmup_num_steps must be a positive integer"; warmup as long as the run '
        "means the learning rate never reaches its peak or decays (DeepSpeed only logs a warning).",
    fix="A positive integer well below total_num_steps (commonly 3-10% of it).",
    source="deepspeed/runtime/lr_schedules.py WarmupLR.__init__, WarmupDecayLR.__init__")
DS128 = rule(
    "DS128", "warning", "learning rate far above what full fine-tuning tolerates",
    what="The learning rate is 5e-4 or more.",
    why="Full fine-tuning of a multi-billion-parameter model diverges above about 1e-4 (typical 1e-5 to 5e-5); "
        "in fp16 it shows as overflow after overflow until the loss scale hits its minimum. LoRA and "
        "P-Tuning tolerate more (1e-4 to 2e-2).",
    fix="For full fine-tuning use 1e-5 to 5e-5 with warmup; keep a higher rate only for LoRA / P-Tuning.",
    source="DeepSpeedExamples issue 531 (GPT-J 6B fp16 at lr 1e-3); LLaMA-Factory examples")
DS129 = rule(
    "DS129", "error", "max_grad_norm in optimizer params",
    what="optimizer.params has max_grad_norm.",
    why="DeepSpeed raises ValueError \"'max_grad_norm' is not supported as an optimizer parameter\".",
    fix='Move it to the top level as "gradient_clipping".',
    source=f"{_ENGINE} _configure_basic_optimizer")
DS130 = rule(
    "DS130", "warning", "unknown top-level key (silently ignored)",
    what="A top-level key DeepSpeed does not read: a misspelling or a key of another tool.",
    why="DeepSpeed ignores unknown top-level keys without a word: a misspelled zero_optimization runs at "
        'ZeRO 0, a "model_parallel_size" splits nothing.',
    fix="Spell it as DeepSpeed does (the suggestion shown) or remove it.",
    source=f"{_DS} DeepSpeedConfig._initialize_params (getters read known keys only)",
    example='"zero_optimisation": {"stage": 3}')
DS131 = rule(
    "DS131", "error", "unknown key in a sub-config DeepSpeed validates",
    what="A key inside zero_optimization, fp16, bf16, offload_* or another pydantic sub-config that is not "
         "one of its fields.",
    why='DeepSpeed\'s pydantic models forbid extra keys: ValidationError "Extra inputs are not permitted" at '
        "initialize.",
    fix="Spell it as DeepSpeed does (the suggestion shown) or remove it.",
    source="deepspeed/runtime/config_utils.py DeepSpeedConfigModel (extra='forbid')")
DS132 = rule(
    "DS132", "warning", "unknown key in a sub-config (silently ignored)",
    what="A key inside activation_checkpointing, flops_profiler, optimizer, scheduler, aio or another "
         "sub-config read with get_scalar_param that DeepSpeed does not read.",
    why="These sub-configs read known keys only: a misspelled key keeps its default without a word.",
    fix="Spell it as DeepSpeed does (the suggestion shown) or remove it.",
    source=f"{_DS} get_scalar_param")
DS133 = rule(
    "DS133", "warning", "deprecated key",
    what="A key DeepSpeed still accepts but has replaced.",
    why="It works with a warning today and is removed in a later release.",
    fix="Use the replacement shown.",
    source="deepspeed/runtime/config_utils.py DeepSpeedConfigModel._process_deprecated_field")
DS134 = rule(
    "DS134", "error", "deprecated key beside its replacement",
    what="A deprecated key and the key replacing it are both set.",
    why="DeepSpeed asserts \"Cannot provide deprecated parameter '<old>' and replacing parameter '<new>' "
        'together".',
    fix="Remove the deprecated key.",
    source="deepspeed/runtime/config_utils.py DeepSpeedConfigModel._process_deprecated_field")
DS135 = rule(
    "DS135", "error", "key of a removed feature",
    what="A key of a feature DeepSpeed has removed (amp, sparse_attention, elasticity, ...).",
    why="DeepSpeed 0.19.8 refuses it with DeepSpeedConfigError rather than silently ignoring it.",
    fix="Remove the key (the evidence says what replaces the feature, if anything).",
    source=f"{_DS} _reject_removed_config_keys")
DS136 = rule(
    "DS136", "warning", '"auto" inside a sub-config silently becomes the default',
    what='A value inside zero_optimization, fp16, bf16 or another validated sub-config is "auto", and the '
         "config goes to deepspeed.initialize directly.",
    why="DeepSpeedConfigModel drops every \"auto\" value before validation, so the field takes its default: "
        '"fp16": {"enabled": "auto"} trains in fp32, "stage": "auto" runs ZeRO 0.',
    fix="Write the value you want.",
    source="deepspeed/runtime/config_utils.py DeepSpeedConfigModel.__init__")
DS137 = rule(
    "DS137", "error", "value of the wrong type",
    what="A value whose type or range DeepSpeed refuses (a string where a number belongs, a section that is "
         "not an object, a negative bucket size).",
    why="Validated sub-configs raise a pydantic ValidationError; top-level numbers given as strings fail later "
        "with a TypeError; a string \"false\" for a flag is true in Python.",
    fix="Use the JSON type shown (numbers and booleans without quotes, sections as objects).",
    source="deepspeed/runtime/config_utils.py; deepspeed/runtime/config.py getters")
DS138 = rule(
    "DS138", "error", "key repeated in one object",
    what="The same key appears twice in one JSON object.",
    why="DeepSpeed's loader refuses the file (dict_raise_error_on_duplicate_keys) when it reads the path "
        "itself (error under --launch engine); json.load (the HF Trainer) silently keeps the last value (warning).",
    fix="Keep one.",
    source="deepspeed/runtime/config_utils.py dict_raise_error_on_duplicate_keys")
DS139 = rule(
    "DS139", "error", "HJSON that json.load cannot read (the HF Trainer)",
    what="The config is HJSON, not JSON: a trailing comma, a comment, an unquoted key or string, single quotes, no "
         "root braces or a UTF-8 byte-order mark. DeepSpeed reads it; json.load does not.",
    why="DeepSpeed reads a config path with hjson.load (deepspeed/runtime/config.py DeepSpeedConfig.__init__). The "
        "HF Trainer and accelerate read it with json.load (accelerate/utils/deepspeed.py HfDeepSpeedConfig.__init__, "
        "which transformers' HfDeepSpeedConfig inherits; TrainingArguments(deepspeed=path) and accelerate's "
        "DeepSpeedPlugin build one): json.decoder.JSONDecodeError when TrainingArguments is created. A loop that "
        "json.load()s the file itself before deepspeed.initialize fails the same way.",
    fix="Write plain JSON at the place shown (double-quoted keys and strings, no comments, no trailing comma); "
        "dsdoctor check --fix OUT.json writes the config as plain JSON.",
    source="accelerate/utils/deepspeed.py HfDeepSpeedConfig.__init__ (json.load); deepspeed/runtime/config.py "
           "DeepSpeedConfig.__init__ (hjson.load)",
    example='{"train_micro_batch_size_per_gpu": 2,} under deepspeed --deepspeed ds.json train.py (HF Trainer)')
DS140 = rule(
    "DS140", "error", "ZeRO stage not 0 to 3",
    what="zero_optimization.stage is not 0, 1, 2 or 3.",
    why="DeepSpeed's ZeroStageEnum refuses it (pydantic ValidationError on 'stage').",
    fix="Use 0, 1, 2 or 3.",
    source="deepspeed/runtime/zero/config.py ZeroStageEnum")
DS141 = rule(
    "DS141", "warning", "offload_param below ZeRO-3 (ignored)",
    what="offload_param is set with ZeRO stage 0, 1 or 2.",
    why="Only ZeRO-3 partitions and offloads parameters; below it the block has no effect and each GPU "
        "still holds all 16-bit weights.",
    fix="Use stage 3 to offload parameters, or remove offload_param (offload_optimizer works from stage 1).",
    source="deepspeed/runtime/zero/offload_config.py (\"Valid only with stage 3\")")
DS142 = rule(
    "DS142", "warning", "ZeRO-3 saves without gathering the weights",
    what="Stage 3 without stage3_gather_16bit_weights_on_model_save: true, and weights or an adapter will "
         "be saved.",
    why="Each rank holds only a shard: the HF Trainer's save_model / save_pretrained write empty or "
        "partitioned tensors (a few hundred MB for a 33B model, an adapter of empty tensors); only "
        "zero_to_fp32.py on the checkpoint recovers them.",
    fix='Set "stage3_gather_16bit_weights_on_model_save": true; or gather with '
        "engine._zero3_consolidated_16bit_state_dict() on every rank before save_pretrained. Weights already "
        "saved empty: recover them from the ZeRO checkpoint with the zero_to_fp32.py DeepSpeed writes into it "
        "(python zero_to_fp32.py CHECKPOINT_DIR OUTPUT_DIR).",
    source="deepspeed/runtime/engine.py save_16bit_model; deepspeed/utils/zero_to_fp32.py; transformers PR 25817")
DS143 = rule(
    "DS143", "warning", 'offload device "auto" (silently no offload)',
    what='offload_optimizer.device or offload_param.device is "auto" and the config goes to '
         "deepspeed.initialize directly.",
    why='DeepSpeedConfigModel drops "auto", so the device is its default "none": nothing is offloaded and the '
        "run OOMs where the offload was meant to save it.",
    fix='Write "cpu" (or "nvme" with nvme_path), or remove the block.',
    source="deepspeed/runtime/config_utils.py; deepspeed/runtime/zero/offload_config.py")
DS144 = rule(
    "DS144", "warning", "communication buckets take much GPU memory",
    what="DeepSpeed's gradient reduction buffers (ZeRO-1/2: reduce_bucket_size elements, twice with overlap_comm, "
         "during the backward pass; ZeRO-3: one reduction bucket plus the parameters gathered ahead) are above 10% "
         "of the GPU's memory.",
    why="They come on top of the model states and activations: reduce_bucket_size 5e9 with overlap_comm is 18.6 "
        "GiB per GPU in bf16. The 5e8 default with overlap_comm is 1.86 GiB (allgather_bucket_size allocates no "
        "buffer in DeepSpeed 0.19.8; the \"4.5 x the bucket sizes\" of older documentation counts 8.4 GiB).",
    fix="Lower reduce_bucket_size (2e8, or hidden_size^2, what the HF Trainer's \"auto\" uses), or set "
        '"overlap_comm": false (one buffer instead of two).',
    source="deepspeed/runtime/zero/stage_1_and_2.py setup_buckets; stage3.py __init__ (ipg buckets); "
           "partitioned_param_coordinator.py (prefetch, max_live_parameters); runtime/utils.py all_gather_dp_groups")
DS145 = rule(
    "DS145", "error", "gradient pre-scaling with ZeRO's reduce scatter",
    what="prescale_gradients is true (a string such as \"false\" counts as true) or gradient_predivide_factor "
         "is not 1.0, with ZeRO stage 2 or 3 and reduce_scatter on (the default).",
    why='ZeRO asserts "pre-scale gradients is not yet supported with ZeRO-N with reduce scatter enabled" '
        '("gradient_predivide_factor != 1.0 is not yet supported ...") when the engine is built.',
    fix='Remove prescale_gradients (or write false without quotes) and gradient_predivide_factor, or set '
        '"reduce_scatter": false in zero_optimization.',
    source="deepspeed/runtime/zero/stage_1_and_2.py and stage3.py __init__")
DS146 = rule(
    "DS146", "error", "a ZeRO checkpoint resumed on another world size",
    what="The run loads a ZeRO checkpoint whose optimizer states were partitioned over another number of ranks.",
    why="Each rank reads its own partition file (zero_pp_rank_R_mp_rank_00_optim_states.pt): with more ranks the "
        "files are missing, with fewer the partitions do not fit; DeepSpeed refuses ('The checkpoint being loaded used "
        "a DP world size of N but the current world size is M') or fails to find a file.",
    fix="Resume on the world size the checkpoint was saved with, or convert it first: zero_to_fp32.py (weights only), "
        "or DeepSpeed's universal checkpoint (ds_to_universal.py, then \"load_universal_checkpoint\": true).",
    source="deepspeed/runtime/engine.py _load_zero_checkpoint; deepspeed/checkpoint/ds_to_universal.py")
DS199 = rule(
    "DS199", "error", "DeepSpeed's own config parser (--deep)",
    what="With --deep, DeepSpeed's DeepSpeedConfig is built from the file: this is what it raised, or that it "
         "accepted the file.",
    why="The static checks mirror DeepSpeed; --deep asks the installed DeepSpeed itself.",
    fix="Fix what the message names; the static findings above usually say how.",
    source=f"{_DS} DeepSpeedConfig")
