"""The loaded form of one profile, whatever its format: :class:`Profile` (launch rows in start order and what the
file says about itself), filled by the loaders of :mod:`mfulib.collect.from_prof`."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Profile:
    """One loaded profile: launch rows (start order) and what the file says about itself."""
    path: str
    fmt: str
    backend: str
    rows: list
    timing_method: str
    tagged: bool = False  # rows carry iterations from this tool's ranges / markers
    delimiter: str | None = None
    iterations_from: str | None = None  # mfu_iter | marker_kernels | profiler_step (set by the loader), else analyse
    range_sets: dict = field(default_factory=dict)  # the profile's own ranges (mfulib.collect.from_prof.ranges)
    host_launches: int | None = None  # launches the host side recorded (None: not known)
    launches_counted_apart: bool = False  # host_launches is a total from another table (msprof api_statistic),
    #                                       not matched launch by launch to kernel records (as CUDA correlation ids are)
    lost_launches: int = 0  # host launches without a kernel record
    lost_by_iter: dict = field(default_factory=dict)
    timestamps: bool = True
    device: dict = field(default_factory=dict)
    runtime: dict | None = None
    l2_bytes: float | None = None
    l2_source: str | None = None
    bandwidth_gbps: float | None = None
    case_id: int | None = None
    impl: str | None = None
    warmup: int | None = None
    repeats: int | None = None
    flags: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)
