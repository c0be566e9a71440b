"""A tiny random-weight Llama in Hugging Face format with a locally trained byte-level BPE tokenizer."""

from __future__ import annotations

from pathlib import Path

CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "The quick brown fox jumps over the lazy dog. " * 4,
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16",
    "Hello! How can I help you today? Please tell me more about your question.",
]


CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n"
                 "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}")


def write_tiny_llama(folder: Path, vocab_size: int = 512) -> Path:
    """Save config, random weights and tokenizer to ``folder`` (no network)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<s>", "</s>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 20, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")
    fast.chat_template = CHAT_TEMPLATE  # chat routes need one (ShareGPT sets are chats)
    fast.save_pretrained(folder)
    config = LlamaConfig(vocab_size=len(fast), hidden_size=128, intermediate_size=256,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=4096, bos_token_id=fast.bos_token_id,
                         eos_token_id=fast.eos_token_id, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(folder, safe_serialization=True)
    return folder
