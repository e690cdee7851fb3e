"""Every bound the sandbox puts on a submission, declared once.

One frozen record (``LIMITS``), like nsjail's one declared config: the
jailed sandbox (``pool.Sandbox``), ``check``'s plain child
(``plain.PlainSandbox``), the worker's settings (``worker_jail``), the
keeper's watch of the scratch folder, the wire's decoding and what the
worker reports all read their bounds here, so that a bound cannot differ
between the side that keeps within it and the side that checks it.
A rubric may change the per-submission ones for a run (``memory_mb``,
``output_chars``, ``total_seconds``: ``Sandbox.run``'s arguments); the
others are the jail's and the grader's own.
"""
from __future__ import annotations

from dataclasses import dataclass

_MIB = 1024 * 1024


@dataclass(frozen=True)
class SandboxLimits:
    """The sandbox's bounds. Sizes in bytes unless the name says
    otherwise; times in seconds."""

    # One submission (defaults of Sandbox.run; the rubric may set them).
    memory_mb: int = 1024          # address space over the worker's own
    output_chars: int = 20_000     # a probe's printed output kept
    total_seconds: float = 300.0   # wall clock of all its probes together
    # One probe's wall clock where the rubric states none ([grading]
    # timeout): the rubric's, or ``--timeout``, reaches every probe
    # through the GradingConfig (``GradingConfig.time_limit``).
    probe_seconds: float = 10.0
    # CPU time: the probes' timeouts plus this, then a hard limit this
    # much later (SIGXCPU first, SIGKILL after).
    cpu_grace_seconds: int = 10
    cpu_hard_extra_seconds: int = 5
    # Results the parent keeps per submission until it is judged, across
    # all its workers (the reference needs about 0.5 MB).
    results_mb: int = 64

    # The inmate's process and its scratch folder (a tmpfs of this size
    # with a mount namespace, else a folder the keeper watches).
    file_bytes: int = 64 * _MIB            # RLIMIT_FSIZE
    extra_processes: int = 64              # RLIMIT_NPROC over the user's
    # As root, a worker whose account is busy with another worker runs as
    # one of these uids (no account, no process: worker_uids.py): the
    # range systemd's uid table leaves unused, below its dynamic users'.
    spare_uids: tuple[int, int] = (60_578, 61_184)
    scratch_bytes: int = 64 * _MIB         # all the inmate may write
    scratch_entries: int = 10_000          # files the scratch may hold
    watch_seconds: float = 0.05            # the keeper's check interval
    # The inmate's own descriptors are checked at every interval, those
    # of the processes it forked every so many (that reads all of /proc).
    descendants_every: int = 20
    kill_grace_seconds: float = 5.0        # a killed worker reaped within

    # The wire: what the parent decodes of one worker's messages.
    message_bytes: int = 64 * _MIB         # one frame
    header_bytes: int = 1 * _MIB           # its JSON header
    outputs: int = 64                      # tensors per result
    shape_ints: int = 200_000              # shape entries per probe
    # Shape records the worker streams while one traced probe runs (one
    # per statement run: a loop over heads makes a few dozen); past it
    # the worker is stopped, its trace no evidence.
    shape_frames: int = 20_000
    text_chars: int = 200_000              # each text field, then cut
    retained_bytes: int = 512 * _MIB       # all frames of one worker
    wire_changed_names: int = 20           # names of changed state
    name_chars: int = 200                  # each of them, then cut

    # What the worker reports of a probe (within the wire's bounds).
    error_chars: int = 4000                # an exception's message
    student_frames: int = 3                # student frames quoted in it
    shapes_per_line: int = 20              # distinct shape-lists per line
    changed_names: int = 10                # names of changed state
    # The value recorder (diagnosis of a failing case); the wire refuses
    # more.
    values: int = 48                       # tensors kept per probe
    value_numel: int = 65_536              # elements of one kept tensor
    values_numel: int = 1_048_576          # elements of all of them
    # Fused attention calls recorded with their arguments (q, k, v and
    # the mask each at most value_numel elements; sandbox/fused_recorder.py)
    fused_calls: int = 2


LIMITS = SandboxLimits()
