"""The fd-level noise filter: drop known-harmless lines that native libraries print to file descriptors 1 and 2.

CANN prints one "tiling struct ... is conflict" warning per GEMM tiling lookup (SKILL.md step 5): hundreds of lines
that bury the result table. They come from C++ straight to the fds, so Python-level redirection cannot catch them;
:class:`NativeNoiseFilter` points fds 1 and 2 at pipes while active and forwards every other line at once.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
import threading

# Known harmless native output, matched case-insensitively per line.
NOISE_PATTERNS = (r"tiling struct.*is conflict",)

class NativeNoiseFilter:
    """Filter known-harmless lines that native libraries print to file descriptors 1 and 2.

    CANN writes its "tiling struct ... is conflict" warnings from C++ straight to the fds, so Python-level
    redirection cannot catch them. While active, fds 1 and 2 point at pipes; a reader thread forwards every line
    that matches none of ``patterns`` to the original fd at once (progress bars included) and counts the rest.
    """

    def __init__(self, patterns=NOISE_PATTERNS, enabled: bool = True):
        self.patterns = [re.compile(p, re.I) for p in patterns]
        self.enabled = enabled
        self.counts = {p.pattern: 0 for p in self.patterns}
        self._saved, self._threads = {}, []

    def summary(self) -> dict:
        return {"enabled": self.enabled, "patterns": list(self.counts), "lines_dropped": dict(self.counts),
                "why": "known-harmless native warnings (CANN tiling struct conflicts) unrelated to GEMM peaks"}

    def _noise(self, line: str) -> bool:
        for p in self.patterns:
            if p.search(line):
                self.counts[p.pattern] += 1
                return True
        return False

    def _pump(self, rfd: int, out_fd: int):
        buf = b""
        while True:
            chunk = os.read(rfd, 65536)
            if not chunk:
                break
            buf += chunk
            while True:
                nl = buf.find(b"\n")
                if nl < 0:
                    break
                line, buf = buf[: nl + 1], buf[nl + 1:]
                if not self._noise(line.decode("utf-8", "replace")):
                    os.write(out_fd, line)
            cr = buf.rfind(b"\r")  # progress bars redraw with \r: forward them without waiting for a newline
            if cr >= 0:
                os.write(out_fd, buf[: cr + 1])
                buf = buf[cr + 1:]
        if buf and not self._noise(buf.decode("utf-8", "replace")):
            os.write(out_fd, buf)
        os.close(rfd)

    @staticmethod
    def _flush_python_streams():
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()

    def __enter__(self):
        if not self.enabled:
            return self
        self._flush_python_streams()
        for fd in (1, 2):
            saved = os.dup(fd)
            r, w = os.pipe()
            os.dup2(w, fd)
            os.close(w)
            t = threading.Thread(target=self._pump, args=(r, saved), daemon=True)
            t.start()
            self._saved[fd] = saved
            self._threads.append(t)
        return self

    def __exit__(self, *exc):
        if not self.enabled:
            return False
        self._flush_python_streams()
        for fd, saved in self._saved.items():
            os.dup2(saved, fd)  # closes the pipe's last write end: the pump sees EOF
        for t in self._threads:
            t.join(timeout=5)
        for saved in self._saved.values():
            os.close(saved)
        self._saved, self._threads = {}, []
        return False


def native_noise_filter(enabled: bool = True, patterns=NOISE_PATTERNS) -> NativeNoiseFilter:
    return NativeNoiseFilter(patterns, enabled)
