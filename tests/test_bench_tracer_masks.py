"""bench/bench_tracer_masks.py: the chunk-masked reference counts the hand value in both mask modes (a small shape;
the bench's timing is its own business, not asserted here)."""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import bench_tracer_masks as btm  # noqa: E402


def test_both_mask_modes_count_the_causal_pairs_of_every_chunk(tmp_path):
    """[2, 8192, 1024], 8 heads (d = 128): 2^28 // (2 * 8 * 8192) = 2048 rows per chunk, so 4 chunks of [2048, 8192]
    masks (2^24 entries: computed in the value mode, described in the default). Hand count: projections
    4 * 2 * 2 * 8192 * 1024^2 = 137438953472, attention 2 * 2 * 8 * (8192 * 8193 / 2) * 256 = 274911461376."""
    out = tmp_path / "r.json"
    assert btm.main(["--shape", "2,8192,1024", "--heads", "8", "--n", "1", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    want = 137438953472 + 274911461376
    assert res["hand_flops"] == want and res["ok"] and res["chunks"] == 4 and res["mask_shape"] == [2048, 8192]
    assert res["flops"] == {"value": [[want, False]], "description": [[want, False]]}
