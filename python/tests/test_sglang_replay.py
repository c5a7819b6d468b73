"""The placement replay (sglang_replay.py) at a small size, through the stand-in of SGLang's
cache controller: Table 2 through SGLang's own calls. Shared prefixes (the conversation trace's
system prompt, looked up by requests arriving together) are served from DRAM; pages no other
request holds are never placed there; agentic sessions past l_agent_tokens live on SSD; forcing
SSD moves every hit there and serves the same pages."""

import argparse

import pytest

import sglang_replay as sr

TRACE = sr.DEFAULT_TRACE


def args(workload, **kw):
    base = dict(workload=workload, page_size=64, dram_bytes="64MiB", ssd_bytes="512MiB",
                prefill_tokens_per_s=20000.0)
    base.update(kw)
    return argparse.Namespace(**base)


def test_the_conversation_trace_serves_its_shared_prefix_from_dram():
    requests = sr.conversation(TRACE, 40)
    report = sr.run(args("conversation"), requests)
    placed, forced = report["placed"], report["forced_ssd"]
    assert placed["hit_pages"]["dram"] > 0 and placed["restore_ms"]["dram"]["count"] > 0
    assert placed["placed_bytes"]["dram"] > 0 and placed["dram_peak_bytes"] > 0
    assert placed["one_shot_pages_in_dram"] == 0
    # The same pages are hits either way; forced to SSD, none comes from DRAM.
    assert forced["hit_pages"]["dram"] == 0 and forced["placed_bytes"]["dram"] == 0
    assert sum(forced["hit_pages"].values()) == sum(placed["hit_pages"].values())
    # Most bytes are requests' own pages: SSD.
    assert placed["placed_bytes"]["ssd"] > 10 * placed["placed_bytes"]["dram"]


def test_agentic_sessions_past_l_agent_live_on_ssd():
    requests = sr.agentic(sessions=3, turns=6, turn_blocks=12, gap_s=5.0)
    report = sr.run(args("agentic"), requests)
    placed = report["placed"]
    assert placed["one_shot_pages_in_dram"] == 0
    assert placed["hit_pages"]["ssd"] > 0
    # Only the tool block shared by every session can be in DRAM, nothing of the contexts.
    assert placed["placed_bytes"]["dram"] <= sr.BLOCK_TOKENS // 64 * placed["page_bytes"]


def test_a_malformed_trace_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "hash_ids": "nope"}\n')
    with pytest.raises(ValueError, match="no trace request"):
        sr.conversation(str(bad), 5)
