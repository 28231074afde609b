"""DecodeGraph without a GPU: what it refuses, and its eager steps (the capture itself needs
CUDA: tests/python/gpu/test_transformers.py)."""

import os
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")

from moe_a2a.integrations.decode_graph import DecodeGraph  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tiny_moe_models import COMMON, build  # noqa: E402


def test_a_growing_cache_is_refused():
    with pytest.raises(TypeError, match="StaticCache"):
        DecodeGraph(build("mixtral"), transformers.DynamicCache())


def test_eager_steps_equal_the_models_steps_and_bad_input_is_named():
    """With more warm-up steps than the cache holds, every step is eager (no CUDA needed): each
    equals the model's own step on a DynamicCache, and a full cache or a wrong shape raises."""
    model = build("mixtral").eval()
    ids = torch.randint(1, COMMON["vocab_size"], (2, 5), generator=torch.Generator().manual_seed(3))
    cache = transformers.StaticCache(config=model.config, max_cache_len=ids.shape[1] + 3)
    with torch.no_grad():
        out = model(input_ids=ids, past_key_values=cache, use_cache=True)
        ref = model(input_ids=ids, use_cache=True)
    step = DecodeGraph(model, cache, warmup_steps=10)
    with pytest.raises(ValueError, match=r"\[batch, 1\]"):
        step(ids)
    tokens = out.logits[:, -1:].argmax(-1)
    ref_cache = ref.past_key_values
    for _ in range(3):
        got = step(tokens)
        with torch.no_grad():
            want = model(input_ids=tokens, past_key_values=ref_cache, use_cache=True).logits[:, -1:]
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        tokens = got[:, -1:].argmax(-1)
    assert not step.captured and step.length == cache.get_max_length()
    with pytest.raises(ValueError, match="StaticCache is full"):
        step(tokens)
    with pytest.raises(ValueError, match="warmup_steps"):
        DecodeGraph(model, cache, warmup_steps=0)
