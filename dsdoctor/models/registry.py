"""The registry: model names and the values of their repositories' ``config.json`` (kept as data, in the
repositories' own key names, so that a user's local ``config.json`` goes through exactly the same code)."""

from __future__ import annotations

#: name -> (repository, values of its config.json). ``tie_word_embeddings`` is written out where the config
#: relies on ``PretrainedConfig``'s default (True), as ChatGLM-6B's does.
REGISTRY: dict[str, tuple[str, dict]] = {
    "chatglm-6b": ("THUDM/chatglm-6b", {
        "model_type": "chatglm", "hidden_size": 4096, "inner_hidden_size": 16384, "num_layers": 28,
        "num_attention_heads": 32, "vocab_size": 130528, "max_sequence_length": 2048,
        "tie_word_embeddings": True, "torch_dtype": "float16"}),
    "chatglm2-6b": ("THUDM/chatglm2-6b", {
        "model_type": "chatglm", "hidden_size": 4096, "ffn_hidden_size": 13696, "kv_channels": 128,
        "num_layers": 28, "num_attention_heads": 32, "multi_query_attention": True, "multi_query_group_num": 2,
        "padded_vocab_size": 65024, "add_bias_linear": False, "add_qkv_bias": True, "rmsnorm": True,
        "post_layer_norm": True, "seq_length": 32768, "tie_word_embeddings": False, "torch_dtype": "float16"}),
    "chatglm3-6b": ("THUDM/chatglm3-6b", {
        "model_type": "chatglm", "hidden_size": 4096, "ffn_hidden_size": 13696, "kv_channels": 128,
        "num_layers": 28, "num_attention_heads": 32, "multi_query_attention": True, "multi_query_group_num": 2,
        "padded_vocab_size": 65024, "add_bias_linear": False, "add_qkv_bias": True, "rmsnorm": True,
        "post_layer_norm": True, "seq_length": 8192, "tie_word_embeddings": False, "torch_dtype": "float16"}),
    "glm-4-9b": ("THUDM/glm-4-9b", {
        "model_type": "chatglm", "hidden_size": 4096, "ffn_hidden_size": 13696, "kv_channels": 128,
        "num_layers": 40, "num_attention_heads": 32, "multi_query_attention": True, "multi_query_group_num": 2,
        "padded_vocab_size": 151552, "add_bias_linear": False, "add_qkv_bias": True, "rmsnorm": True,
        "post_layer_norm": True, "seq_length": 8192, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "qwen-7b": ("Qwen/Qwen-7B", {
        "model_type": "qwen", "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
        "num_attention_heads": 32, "vocab_size": 151936, "seq_length": 8192, "no_bias": True,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "qwen-14b": ("Qwen/Qwen-14B", {
        "model_type": "qwen", "hidden_size": 5120, "intermediate_size": 27392, "num_hidden_layers": 40,
        "num_attention_heads": 40, "vocab_size": 152064, "seq_length": 2048, "no_bias": True,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "qwen2-7b": ("Qwen/Qwen2-7B", {
        "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
        "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
        "max_position_embeddings": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "qwen2.5-0.5b": ("Qwen/Qwen2.5-0.5B", {
        "model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
        "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
        "max_position_embeddings": 32768, "tie_word_embeddings": True, "torch_dtype": "bfloat16"}),
    "qwen2.5-1.5b": ("Qwen/Qwen2.5-1.5B", {
        "model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
        "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936,
        "max_position_embeddings": 131072, "tie_word_embeddings": True, "torch_dtype": "bfloat16"}),
    "qwen2.5-7b": ("Qwen/Qwen2.5-7B", {
        "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
        "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
        "max_position_embeddings": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "qwen2.5-14b": ("Qwen/Qwen2.5-14B", {
        "model_type": "qwen2", "hidden_size": 5120, "intermediate_size": 13824, "num_hidden_layers": 48,
        "num_attention_heads": 40, "num_key_value_heads": 8, "vocab_size": 152064,
        "max_position_embeddings": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "llama-2-7b": ("meta-llama/Llama-2-7b-hf", {
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
        "max_position_embeddings": 4096, "tie_word_embeddings": False, "torch_dtype": "float16"}),
    "llama-2-13b": ("meta-llama/Llama-2-13b-hf", {
        "model_type": "llama", "hidden_size": 5120, "intermediate_size": 13824, "num_hidden_layers": 40,
        "num_attention_heads": 40, "num_key_value_heads": 40, "vocab_size": 32000,
        "max_position_embeddings": 4096, "tie_word_embeddings": False, "torch_dtype": "float16"}),
    "llama-3-8b": ("meta-llama/Meta-Llama-3-8B", {
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
        "max_position_embeddings": 8192, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "llama-3.1-8b": ("meta-llama/Llama-3.1-8B", {
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
        "max_position_embeddings": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "mistral-7b": ("mistralai/Mistral-7B-v0.1", {
        "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
        "max_position_embeddings": 32768, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "baichuan2-7b": ("baichuan-inc/Baichuan2-7B-Base", {
        "model_type": "baichuan", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "vocab_size": 125696, "model_max_length": 4096,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "baichuan2-13b": ("baichuan-inc/Baichuan2-13B-Base", {
        "model_type": "baichuan", "hidden_size": 5120, "intermediate_size": 13696, "num_hidden_layers": 40,
        "num_attention_heads": 40, "vocab_size": 125696, "model_max_length": 4096,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "internlm2-7b": ("internlm/internlm2-7b", {
        "model_type": "internlm2", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 92544, "bias": False,
        "max_position_embeddings": 32768, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "yi-6b": ("01-ai/Yi-6B", {
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 64000,
        "max_position_embeddings": 4096, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "gpt-j-6b": ("EleutherAI/gpt-j-6b", {
        "model_type": "gptj", "n_embd": 4096, "n_layer": 28, "n_head": 16, "n_inner": None, "vocab_size": 50400,
        "n_positions": 2048, "rotary_dim": 64, "tie_word_embeddings": False, "torch_dtype": "float32"}),
}

#: Names users type for the same repository.
ALIASES = {"chatglm": "chatglm-6b", "chatglm2": "chatglm2-6b", "chatglm3": "chatglm3-6b", "glm4-9b": "glm-4-9b",
           "glm-4-9b-chat": "glm-4-9b", "chatglm3-6b-base": "chatglm3-6b", "llama2-7b": "llama-2-7b",
           "llama2-13b": "llama-2-13b", "llama3-8b": "llama-3-8b", "meta-llama-3-8b": "llama-3-8b",
           "mistral-7b-v0.1": "mistral-7b", "baichuan2-7b-base": "baichuan2-7b", "baichuan2-7b-chat": "baichuan2-7b",
           "baichuan2-13b-base": "baichuan2-13b", "baichuan2-13b-chat": "baichuan2-13b",
           "llama-2-7b-hf": "llama-2-7b", "llama-2-13b-hf": "llama-2-13b", "llama-2-7b-chat-hf": "llama-2-7b",
           "llama-2-13b-chat-hf": "llama-2-13b", "qwen2-7b-instruct": "qwen2-7b",
           "qwen2.5-7b-instruct": "qwen2.5-7b", "qwen2.5-14b-instruct": "qwen2.5-14b",
           "qwen2.5-0.5b-instruct": "qwen2.5-0.5b", "qwen2.5-1.5b-instruct": "qwen2.5-1.5b",
           "internlm2-chat-7b": "internlm2-7b", "yi-6b-chat": "yi-6b", "meta-llama-3-8b-instruct": "llama-3-8b"}
