# The first tutorial's script (shared/tutorials/deepspeed-chatglm-multigpu-finetuning.zh.txt, section 3.2), with the
# line breaks the page lost restored; nothing else changed (the dataloader is the tutorial's own undefined name).
import torch
import deepspeed
from transformers import AutoTokenizer, AutoModel
from peft import LoraConfig, get_peft_model


def train():
    model_name = "THUDM/chatglm-6b"
    tokenizer = AutoTokenizer.from_pretrained(model_name, trust_remote_code=True)
    # bf16要求Ampere及以上架构，V100等旧卡请改成fp16
    model = AutoModel.from_pretrained(
        model_name,
        trust_remote_code=True,
        torch_dtype=torch.bfloat16,
    )
    # 用LoRA冻结大部分参数，只训练query_key_value上的低秩矩阵
    model = get_peft_model(model, LoraConfig(
        r=8,
        lora_alpha=16,
        target_modules=["query_key_value"],
        lora_dropout=0.1,
        bias="none",
    ))
    # 梯度检查点用计算换显存，多卡显存紧张时建议打开
    model.gradient_checkpointing_enable()
    engine, optimizer, _, lr_scheduler = deepspeed.initialize(
        model=model,
        model_parameters=[p for p in model.parameters() if p.requires_grad],
        config="ds_config.json",
    )
    for step, batch in enumerate(dataloader):
        outputs = engine(
            input_ids=batch["input_ids"].cuda(),
            labels=batch["labels"].cuda(),
        )
        engine.backward(outputs.loss)
        engine.step()
