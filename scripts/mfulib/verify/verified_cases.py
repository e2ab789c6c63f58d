"""The verify gate: which cases a timing step may run. A case is timed only when the verify step (verify.json) passed it on
this backend for the work directory's current model.py / model_new.py, or when the user forces it
(``--unverified-ok``, marked per case in the output).

Rules (docs/ARCHITECTURE.md#work-directory, the verify.json row: the collector and the search time only cases that
passed verify):

* a row with status ``pass`` admits its case;
* any other status (skipped, rejected, fail, error, oom, crashed, timeout) excludes it with verify's reason; the
  collector hands its top-k slot to the next case of its ranking and lists the excluded case as skipped;
* a case with no row (appended by the shape search, or a verify run limited by ``--cases``) is verified first by
  the same runner as verify_op.py (:func:`mfulib.verify.correctness.verify_isolated`, after the same skip rules,
  :func:`skip_reason`), and its row is merged into verify.json (:func:`mfulib.schemas.verify_json.merge_rows`);
* a verify.json made on another backend, or for another model.py / model_new.py (sha256 in its ``inputs``), is
  refused (UserError naming the fix); with ``--unverified-ok`` its rows are ignored instead.
"""
from __future__ import annotations

import os

from mfulib.backends import backend_class
from mfulib.core.errors import UserError
from mfulib.schemas import verify_json as _vj


def default_max_input_mb(backend: str):
    """verify_op.py's default input cap in MB: the backend's
    :attr:`~mfulib.backends.base.Backend.verify_max_input_mb` (1 on cpu, where the interpreter is slow and larger
    cases are verified on an accelerator), None (no cap) elsewhere."""
    return backend_class(backend).verify_max_input_mb


def skip_reason(info, backend: str, max_input_mb=None, skip_bf16: bool = False):
    """Why verify does not run a case (:class:`mfulib.core.cases.CaseInfo` ``info``) on ``backend``, or None.

    bf16 cases on a backend that cannot run them (cpu: the interpreter) or with ``skip_bf16``; cases whose inputs
    exceed ``max_input_mb`` (1 MB = 1e6 bytes) - at the backend's own default cap
    (:attr:`~mfulib.backends.base.Backend.verify_max_input_mb`), with what to do."""
    cls = backend_class(backend)
    if (not cls.runs_bf16 or skip_bf16) and info.compute_dtype == "bfloat16":
        return cls.bf16_skip_reason if not cls.runs_bf16 else "--skip-bf16"
    why = over_input_cap(info.input_bytes, max_input_mb)
    if why and max_input_mb == cls.verify_max_input_mb:
        why += (f" (the default cap on {backend}: verify the case on an accelerator, or raise the cap with "
                "VERIFY_ARGS='--max-input-mb N')")
    return why


def over_input_cap(input_bytes: int, max_input_mb) -> str | None:
    """Why inputs of ``input_bytes`` exceed verify's input cap ``max_input_mb`` (1 MB = 1e6 bytes; None: no cap),
    or None."""
    if max_input_mb is not None and input_bytes > max_input_mb * 1e6:
        return f"inputs {input_bytes:,} B ({input_bytes / 1e6:.4g} MB) > --max-input-mb {max_input_mb:g}"
    return None


def skipped_row(info, reason: str) -> dict:
    """The verify.json row of a case verify did not run."""
    return {"case": info.case_id, "dtype": info.compute_dtype, "shape": info.shape_str, "status": "skipped",
            "reason": reason}


class Gate:
    """The verify verdicts of one work directory for one backend.

    ``opdir``: :class:`mfulib.core.opdir.OpDir`; ``backend``: a backend name (npu, cuda, cpu, ...); ``device``: the torch device string the
    missing rows are verified on; ``forced``: ``--unverified-ok`` (every case admitted, marked).
    Raises UserError (from the constructor) for a verify.json of another backend or of other model files, unless
    ``forced``."""

    def __init__(self, opdir, backend: str, device: str, seed: int = 0, case_timeout_s: float = 600.0,
                 forced: bool = False, log=None):
        self.opdir, self.backend, self.device, self.seed = opdir, backend, device, seed
        self.case_timeout_s, self.forced = case_timeout_s, forced
        self.log = log or (lambda _msg: None)
        self.path = opdir.file(_vj.FILE_NAME)
        self.rows, self.verified_now, self.ignored = {}, [], None
        if os.path.exists(self.path):
            doc = _vj.read_verify_json(self.path)
            self.ignored = self._stale(doc)
            if self.ignored and not forced:
                raise UserError(f"{self.path}: {self.ignored} - re-run verify on this backend for these files "
                                f"(make verify BACKEND={backend}, or verify_op.py --op-dir {opdir.path} --backend "
                                f"{backend}), or pass --unverified-ok to time unverified cases (marked)")
            if not self.ignored:
                self.rows = {r["case"]: r for r in doc["cases"]}

    def _stale(self, doc):
        made_on = _vj.backend_of(doc)
        if made_on and made_on != self.backend:
            return f"verified on {made_on}, this run is on {self.backend}"
        recorded = doc.get("inputs") or {}
        now = _vj.input_digests(self.opdir.path)
        changed = [name for name, sha in recorded.items() if sha and now.get(name) != sha]
        return f"made for another {' and '.join(changed)} (content changed since verify)" if changed else None

    def admits(self, case_id: int):
        """(admitted, mark): mark is the per-case ``verify`` block of performance.json {status, reason, forced}
        (status None: no row yet - admitted pending :meth:`verify`). Not admitted: mark["reason"] says why."""
        row = self.rows.get(case_id)
        status, reason = (row["status"], row.get("reason")) if row else (None, None)
        mark = {"status": status, "reason": reason, "forced": False}
        if status == "pass" or (status is None and not self.forced):
            return True, mark
        if self.forced:
            mark.update(forced=True, reason=(f"no passing verify ({status or 'no row'}"
                                             f"{': ' + reason if reason else ''}"
                                             f"{'; ' + self.ignored if self.ignored else ''}) - "
                                             "timed because of --unverified-ok"))
            return True, mark
        mark["reason"] = (f"not verified: verify {status}" + (f" ({reason})" if reason else "") +
                          " - --unverified-ok (make ACCEPT_UNVERIFIED_CASES=1) times it anyway (marked) when it is"
                          " selected (--cases picks it)")  # admits() judges every case, not only the top-k
        return False, mark

    def recorded_reason(self, case_id: int):
        """verify.json's own reason for ``case_id`` (why verify skipped, rejected or failed it), or None (a pass, no
        row, or rows ignored under ``forced``)."""
        return (self.rows.get(case_id) or {}).get("reason")

    def pending(self, case_ids) -> list:
        """The ids of ``case_ids`` that have no verify row and must be verified before they are timed."""
        return [] if self.forced else [c for c in case_ids if c not in self.rows]

    def verify(self, case_ids) -> list:
        """Verify ``case_ids`` (verify_op.py's skip rules, then :func:`mfulib.verify.correctness.verify_isolated`), merge the
        rows into verify.json (created when absent) and return them."""
        from mfulib.verify import correctness as _verify
        from mfulib.run.interpreter import summary
        rows, todo = [], []
        cap = default_max_input_mb(self.backend)
        for cid in case_ids:
            info = self.opdir.describe(cid)
            why = skip_reason(info, self.backend, cap)
            if why:
                rows.append(skipped_row(info, why))
            else:
                todo.append(cid)
        self.log(f"verifying case(s) {list(case_ids)} first: no row in {self.path} (the collector times only "
                 "verified cases)")
        if todo:
            rows += _verify.verify_isolated(self.opdir.path, todo, self.device, seed=self.seed,
                                            case_timeout_s=self.case_timeout_s, backend=self.backend)
        n_cases = len(self.opdir.read_cases())

        def new_doc():
            from mfulib.core.jsonio import provenance
            doc = provenance(_vj.TOOL, _vj.SCHEMA, device={"backend": self.backend, "device": self.device,
                                                         "why": "verified by the collector before timing"})
            doc.update(op=self.opdir.op_name, work_dir=self.opdir.path, seed=self.seed,
                       tolerance=_verify.TOLERANCE, tolerance_tf32=_verify.TOLERANCE_TF32, cases=[])
            return doc

        merged = {**self.rows, **{r["case"]: r for r in rows}}
        updates = {"inputs": _vj.input_digests(self.opdir.path)}
        if backend_class(self.backend).interpreter:
            updates["cpu_adaptations"] = summary(list(merged.values()))
        _vj.merge_rows(self.path, rows, n_cases, new_doc=new_doc, updates=updates)
        for r in rows:
            self.rows[r["case"]] = r
            self.verified_now.append(r["case"])
            self.log(f"verify case {r['case']}: {r['status']}" + (f" ({r.get('reason')})" if r.get("reason") else ""))
        return rows
