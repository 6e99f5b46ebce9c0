# The second tutorial's script (shared/tutorials/trainer-deepspeed-multigpu-finetuning.zh.txt, section 2.3), with the
# line breaks the page lost restored; nothing else changed.
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    Trainer,
    TrainingArguments,
    DataCollatorForSeq2Seq,
)
from datasets import load_dataset

# 1. 加载模型和 tokenizer
model_name = "Qwen/Qwen2-7B"
tokenizer = AutoTokenizer.from_pretrained(model_name, trust_remote_code=True)
model = AutoModelForCausalLM.from_pretrained(
    model_name,
    torch_dtype=torch.bfloat16,
    trust_remote_code=True,
)

# 2. 准备数据集（以 alpaca 格式为例）
dataset = load_dataset("json", data_files="train.json", split="train")


def preprocess(example):
    messages = [
        {"role": "user", "content": example["instruction"]},
        {"role": "assistant", "content": example["output"]},
    ]
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    tokenized = tokenizer(text, truncation=True, max_length=2048, padding=False)
    tokenized["labels"] = tokenized["input_ids"].copy()
    return tokenized


tokenized_dataset = dataset.map(preprocess, remove_columns=dataset.column_names)

# 3. 训练参数
training_args = TrainingArguments(
    output_dir="./output",
    num_train_epochs=3,
    per_device_train_batch_size=4,
    gradient_accumulation_steps=4,
    learning_rate=2e-5,
    lr_scheduler_type="cosine",
    warmup_ratio=0.1,
    bf16=True,
    logging_steps=10,
    save_strategy="epoch",
    deepspeed="./ds_config.json",  # 关键：指向 DeepSpeed 配置
    gradient_checkpointing=True,  # 省显存，但慢约 20%
    dataloader_num_workers=4,
    report_to="none",
)

# 4. 创建 Trainer 并启动
trainer = Trainer(
    model=model,
    args=training_args,
    train_dataset=tokenized_dataset,
    data_collator=DataCollatorForSeq2Seq(tokenizer, padding=True),
)
trainer.train()
