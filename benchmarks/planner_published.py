"""The planner against published training runs (the README's planner-vs-published table).

    python benchmarks/planner_published.py

Each run of tests/published_layouts.py and tests/published_configs.py (sources cited there) is planned from its
model shape, cluster and global batch alone; the published recipe is priced by the same cost model beside the planner's choice.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.published_layouts import table  # noqa: E402

if __name__ == "__main__":
    print(table())
