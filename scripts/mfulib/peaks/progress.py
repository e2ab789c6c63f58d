"""How the peak calibration shows its progress: a tqdm bar on a terminal, nothing per point otherwise.

The sweep times a few hundred shapes; one line per shape in a log (``make all`` writes every step's output to the
same stream, interleaved) buries the other steps. So on a terminal one bar counts the shapes timed and shows the
latest progress text (the mode, its best sweep figure, the last shape) in place, and without a terminal (a log, a
pipe, make's output) nothing is printed per point: the result table (:func:`mfulib.report.tables.peak_table`),
printed once at the end, holds every figure. The progress texts come from :func:`mfulib.peaks.calib.calibrate`.
"""
from __future__ import annotations


class ProgressBar:
    """A ``progress(text)`` callable for :func:`mfulib.peaks.calib.run_calibration` drawing one tqdm bar on
    ``stream`` (a terminal); :meth:`close` ends the bar. Each call counts one step and shows ``text`` beside it."""

    def __init__(self, stream):
        from tqdm import tqdm
        self.bar = tqdm(total=None, unit=" step", desc="peak_calib", file=stream, dynamic_ncols=True, leave=True)

    def __call__(self, text: str) -> None:
        self.bar.set_postfix_str(text, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def console_progress(stream, quiet: bool = False):
    """The progress callable for ``stream``: a :class:`ProgressBar` when it is a terminal and not ``quiet``, else
    None (nothing per point)."""
    isatty = getattr(stream, "isatty", None)
    if quiet or not (isatty and isatty()):
        return None
    return ProgressBar(stream)
