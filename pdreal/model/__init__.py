"""Llama-family model over ragged batches and a paged KV cache; weights, tokenizer, sampling."""
