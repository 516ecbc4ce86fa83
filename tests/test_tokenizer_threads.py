"""Shard tokenization on one core: `one_thread` switches tokenizers' Rust pool off and restores it.

Thread counts are read from /proc in a fresh interpreter: tokenizers starts its pool lazily, at the first batch
it encodes in parallel, so a process that never left `one_thread` never grows threads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tasks.data.mixing.tokenizer import PARALLELISM, encode_documents, one_thread, train_tokenizer

PROBE = textwrap.dedent("""
    import json, os, sys
    from tasks.data.mixing.tokenizer import encode_documents, one_thread, train_tokenizer
    texts = [("word%d and some text " % i) * 40 for i in range(1500)]
    os.environ["TOKENIZERS_PARALLELISM"] = "false"   # train without starting the pool
    tok = train_tokenizer(texts[:200], 600, 2, ["<eos>"])
    if sys.argv[1] == "keep":
        os.environ["TOKENIZERS_PARALLELISM"] = "true"
    else:
        del os.environ["TOKENIZERS_PARALLELISM"]
    threads = lambda: len(os.listdir("/proc/self/task"))
    before = threads()
    with one_thread():
        inside = [a.tolist() for a in encode_documents(tok, texts, "uint16")]
    during = threads()
    env_after = os.environ.get("TOKENIZERS_PARALLELISM")
    outside = [a.tolist() for a in encode_documents(tok, texts, "uint16")]
    print(json.dumps({"before": before, "during": during, "after": threads(), "env_after": env_after,
                      "same_ids": inside == outside}))
""")


def probe(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True,
                         cwd=os.getcwd(), timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="thread count read from /proc")
def test_one_thread_encodes_without_starting_the_pool_and_restores_it():
    unset, kept = probe("unset"), probe("keep")
    for r in (unset, kept):
        assert r["during"] == r["before"]   # no pool thread started inside
        assert r["after"] > r["during"]     # the look-alike: outside, the same call starts the pool
        assert r["same_ids"]                # ids do not depend on threads
    assert unset["env_after"] is None and kept["env_after"] == "true"  # the caller's setting comes back


def test_one_thread_nests_and_restores_only_when_the_last_leaves(monkeypatch):
    monkeypatch.setenv(PARALLELISM, "1")
    with one_thread():
        with one_thread():
            assert os.environ[PARALLELISM] == "false"
        assert os.environ[PARALLELISM] == "false"   # the outer use is still inside
    assert os.environ[PARALLELISM] == "1"
    with pytest.raises(RuntimeError):
        with one_thread():
            raise RuntimeError("a failing shard")
    assert os.environ[PARALLELISM] == "1"           # restored on an error too
    tok = train_tokenizer(["abc abd abe"] * 20, 300, 1, ["<eos>"])
    with one_thread():
        assert [a.tolist() for a in encode_documents(tok, ["abc abe"], "uint16")] == \
            [tok.encode("abc abe", add_special_tokens=False).ids]
