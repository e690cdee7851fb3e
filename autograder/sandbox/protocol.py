"""What the grading parent asks of a worker, and what the worker answers.

The parent never trusts a worker's answer beyond its face value: results are
decoded without executing code (JSON plus safetensors bytes), sizes are capped,
and expected values never travel to the worker. How they travel, and the caps:
``autograder/sandbox/wire.py``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from autograder.sandbox.limits import LIMITS

# Statuses a probe can end in. Only "ok" carries outputs.
OK = "ok"
# Appended to a longer call's problem when a new module's first call on
# that input raises too: the length, not an earlier call, makes it raise.
FRESH_RAISES = (" (a new module's first call on that input raises too: "
                "the input's length makes it raise, not an earlier call)")
ERROR = "error"              # the student code raised (message says so)
TIMEOUT = "timeout"          # wall-clock limit hit; worker killed
MEMORY = "memory"            # memory limit hit
CRASH = "crash"              # worker died or exited (exit, os._exit, signal)
IMPORT_ERROR = "import_error"  # the module failed to import
NOT_RUN = "not_run"          # an earlier failure made this probe impossible
ENVIRONMENT = "environment"  # the grader's own environment failed: no grade


@dataclass(frozen=True)
class StandIn:
    """One class of the submission replaced while a probe runs
    (``Probe.stand_in``): its k-th instance checks it is built with
    ``init`` and called on the probe's ``args[0]``, and returns
    ``stand_in_output(drawn_seed, k, shape)``."""

    cls: str                     # the class's name in the submission
    init: dict[str, Any]         # the constructor arguments it must get
    shape: tuple[int, ...]       # what each instance returns

    @classmethod
    def of(cls, data: dict[str, Any]) -> StandIn | None:
        """From a rubric parameter ``{cls = ..., init = {...}, shape =
        [...]}`` (``{}``: none)."""
        if not data:
            return None
        return cls(str(data["cls"]), dict(data.get("init", {})),
                   tuple(int(d) for d in data["shape"]))


@dataclass(frozen=True)
class Probe:
    """One call into the student's code.

    The worker builds ``cls(**init)``, copies every tensor of ``state`` into
    the attribute path it names (``"q.weight"`` -> ``module.q.weight``), sets
    train/eval mode, seeds torch with ``seed`` when given, and calls
    ``module(*args, **kwargs)``.
    """

    id: str
    cls: str
    init: dict[str, Any]
    state: dict[str, torch.Tensor] = field(default_factory=dict)
    args: list[torch.Tensor] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    train: bool = False
    seed: int | None = None
    call: bool = True            # False: construct (and inspect) only
    inspect: bool = False        # report the module's attributes
    trace_shapes: bool = False   # run instrumented code, report shapes
    # trace_shapes: the graded rubric's task methods (class -> methods),
    # whose bodies are traced when they hold no markers: the worker reads
    # no rubric, it gets them here.
    methods: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # trace_shapes: the nonce of the canary record the trace must hold
    # (autograder/checks/trace_integrity.py), chosen by the parent.
    canary: int = 0
    # Seconds of wall clock for this probe: set from the GradingConfig when
    # the grade plans it (grade.plan_checks), whatever the kind built.
    timeout: float = LIMITS.probe_seconds
    # The checks this probe serves. Once a probe hits the time or memory
    # limit, its checks are lost (all-or-nothing), so the sandbox skips any
    # later probe all of whose checks are lost: hostile code costs one time
    # limit per check, not one per case.
    groups: tuple[str, ...] = ()
    # Weights the worker draws itself instead of receiving them (GPT-2
    # size: 9 MB a probe): path -> shape, each 0.02 * randn from one
    # generator seeded with ``drawn_seed``, in path order. The same seed
    # gives two probes the same weights.
    drawn: dict[str, list[int]] = field(default_factory=dict)
    drawn_seed: int = 0
    # A hidden case's probe, marked as such by whoever builds it from the
    # case (``probes.case_probe``; an inspection of sizes only hidden cases
    # have: ``grade.hidden_probe_ids``), never recognised by its id. The
    # worker gets
    # it under an opaque id, only after every public probe has answered
    # (``supervisor.Attempt``), so nothing printed or returned before can
    # carry its data; what it prints waits for publication.
    hidden: bool = False
    # A stand-in for one class of the submission, so that an item judges
    # its own unit whatever that class does (raise, hang, compute wrong):
    # while the probe runs, that name in the submission's module is a
    # module class (:class:`StandIn`) returning known numbers, never an
    # expected value.
    stand_in: StandIn | None = None
    # Call the same module a second time, in eval mode, on the same input
    # with its batch order reversed (dim 0 of every tensor argument): an
    # in-place change of a buffer, an accumulating attribute or a cache
    # keyed on nothing shows there. An eval probe's call is first repeated
    # as it was (same input, same order: ``ProbeResult.repeat``), so that
    # randomness in eval mode (dropout left on) is told apart from code
    # that mixes batch elements. The result's ``again`` holds the second.
    again: bool = False
    # With ``again``: after the second call, a third one on a longer input
    # (the second call's, its first ``again_longer`` tokens appended,
    # within the context length), so that a mask or cache sized by the
    # first call shows: if it raises, returns the first call's length, or
    # gives at any position other values than a new module built the same
    # way whose first call is that input, the second call's result says
    # so (phase "longer").
    again_longer: int = 0
    # With ``again_longer``: the module is causal as built (the rubric
    # judges its causality), so the third call's first positions, whose
    # tokens are the second call's, must give the second call's outputs:
    # a mask sized by the first call and open beyond it shows there even
    # when a rebuilt module shares its state (kept on another module).
    again_prefix: bool = False
    # Before the call, one eval-mode call on the same input, its result
    # and any exception dropped, then the probe's own mode and seed: a
    # train-mode result must not depend on an eval call made before it
    # (``model.eval()`` and ``model.train()`` switch dropout, they change
    # nothing else). The result's ``changed`` holds what that call
    # changed in the module's state, its ``repeat`` the first output of
    # the same eval call made once more after it.
    warm_eval: bool = False
    # Run on a copy of the submission that records the values of the
    # tensors its statements bind, in execution order
    # (``sandbox/value_recorder.py``): the diagnosis of a failing case.
    trace_values: bool = False
    # Run on a fresh import of the submission (a new module namespace,
    # the plain module left as it was): a causal probe shares no module
    # state (a cache replaying earlier outputs) with any other call.
    fresh: bool = False
    # The worker process of the run it goes to: 0, the run's first (every
    # probe by default); n > 0, the run's n-th other one, shared only by
    # the probes with the same number and started after worker n - 1's
    # probes all answered. What a submission keeps outside its module
    # (in ``builtins``, on ``torch``) survives a fresh import, never
    # another process: the causal check's plain calls and its changed
    # ones each in their own (the attention homework's kinds/causal.py),
    # so that no cache replays one in the other.
    process: int = 0


@dataclass
class FusedCall:
    """One call of a fused attention function (``F.scaled_dot_product_
    attention``) the traced copy made (``Probe.trace_values``): its
    student line, its non-tensor arguments and float32 copies of its
    tensors, q, k, v and, if given, the mask (a bool mask as 1.0 where it
    is True)."""

    line: int
    scale: float | None = None
    is_causal: bool = False
    dropout_p: float = 0.0
    mask: str = ""            # "", "bool" or "float": the attn_mask's kind
    tensors: list[torch.Tensor] = field(default_factory=list)


@dataclass
class ProbeResult:
    """The worker's answer to one probe (or the parent's, if it died)."""

    id: str
    status: str
    message: str = ""
    # The call's return value: a tensor gives [t], a tuple/list of tensors
    # gives its items. ``output_kind`` says which ("tensor", "tuple",
    # or the type name of anything else, which is an error).
    outputs: list[torch.Tensor] = field(default_factory=list)
    output_kind: str = ""
    # inspect=True: attribute name -> description, e.g.
    # {"q": {"type": "Linear", "in_features": 7, "out_features": 9,
    #        "bias": True}, "num_heads": {"type": "int", "value": 3}}
    attributes: dict[str, Any] = field(default_factory=dict)
    # trace_shapes=True: first line of a traced statement -> the shapes of
    # the tensors it bound or returned, one entry per execution that differed
    # (each entry a list: one shape per tensor bound, in target order; an
    # empty one: it ran and bound no tensor); also the first line of every
    # function (or lambda) of the submission that ran (an empty entry) and
    # line 0, the canary (``CANARY_LINE``). Never read from the worker's
    # result: the parent rebuilds it from the records the worker streamed
    # while the probe ran (``sandbox/shape_table.py``).
    shapes: dict[int, list[list[list[int]]]] = field(default_factory=dict)
    # Why the streamed records are no evidence (a call of the recorder
    # from code the grader did not make, a line past its cap, a flood):
    # set by the parent, "" when none.
    trace_forged: str = ""
    stdout: str = ""             # captured stdout+stderr, truncated
    seconds: float = 0.0
    # Where a failure happened: "import", "init", "load" (weights), "call",
    # "output" (unusable return value) or "" when ok; the exception's type
    # name ("NotImplementedError" for an unfinished skeleton task) and the
    # last line of the student file in its traceback, when known.
    phase: str = ""
    exception: str = ""
    line: int | None = None
    # Probe.again: the second call's result (status, message, outputs as
    # returned, i.e. in reversed batch order), and the buffers, parameters
    # and attributes the first call changed (``self.mask``, ``heads.0.n``).
    again: ProbeResult | None = None
    changed: list[str] = field(default_factory=list)
    # Probe.again on an eval probe: the first output of the same call
    # made again before the reversed one, on the same input in the same
    # order (randomness in eval mode or state the first call changed shows
    # there, batch elements mixed do not); empty if it raised.
    repeat: list[torch.Tensor] = field(default_factory=list)
    # trace_values=True: (first line of the statement, float32 copy of a
    # tensor it bound or returned), in execution order, capped.
    values: list[tuple[int, torch.Tensor]] = field(default_factory=list)
    # trace_values=True: the fused attention calls, in call order, capped
    # (``sandbox/fused_recorder.py``).
    fused: list[FusedCall] = field(default_factory=list)
    # Reach-ins into the grader the worker's audit caught while any probe
    # of the submission ran (``sandbox/audit.py``), the same on every
    # result of one run: set by the parent, never read from a result.
    reach_ins: list[str] = field(default_factory=list)
    # Reach-ins caught while this probe, or an earlier probe of the same
    # worker, ran (after the import): what could have changed this
    # probe's answer; set by the parent.
    reach_here: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == OK


CANARY_LINE = 0     # no source line is 0: the canary's record


def canary_shape(nonce: int) -> list[int]:
    """The shape the canary record of ``nonce`` carries (the worker
    records it at each function entry of a traced call; the parent,
    which chose ``nonce``, checks it: ``checks/trace_integrity.py``)."""
    return [2 + nonce % 89, 2 + (nonce // 89) % 97]


def stand_in_output(seed: int, index: int, shape: list[int]) -> torch.Tensor:
    """What the ``index``-th stand-in module of a probe returns (see
    ``Probe.stand_in``): the parent computes the same numbers to judge."""
    generator = torch.Generator().manual_seed(1000 * int(seed) + int(index))
    return torch.randn(*shape, generator=generator)
