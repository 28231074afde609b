"""The soak (issue 14, item 6): many rounds on a few AllToAlls at once, mixing shapes, dtypes,
layouts, token counts (0 and max_tokens included), uniform, skewed and single-expert routing,
masked slots, duplicate expert ids and every kind of round (two rounds in flight on an AllToAll
of two buffers among them). Every round is checked on the GPU (round_checks.py: dispatch against
every rank's inputs, combine and the gradients against their closed forms), and every
check_every-th round also on the host against the reference, fp8 bytes exactly. Early on
(round min(rounds / 2, 2000)) the round epoch of two of the AllToAlls is forced just before 2^40
(where the 40 epoch bits of a signal wrap) and 2^64 (where the round counter wraps) through
hooks.set_rounds, and every kind of round is made to land exactly on each point,
its data checked.

The schedule is a function of (seed, round index) alone, so every rank runs the same rounds.
tools/soak.py runs the long profile, test_soak.py the short one, tools/sanitize.sh the sanitize
profile (a fixed handful of checked rounds per kind and layout, tiny shapes) and, for initcheck,
the initcheck profile (the same with the experts on the host: forward rounds only).
"""

import dataclasses
import random
import time
from typing import Callable, Optional, Sequence

import hooks
import round_checks
import torch
from mixed_rounds import KINDS, ROUTINGS, Bank, Shape, Spec, agree, check_round, describe, describe_shape, run_round

from moe_a2a._collective import all_gather

bf16, fp16, fp32 = torch.bfloat16, torch.float16, torch.float32
e4m3fn, e4m3fnuz = torch.float8_e4m3fn, torch.float8_e4m3fnuz
# Rounds of a wrap sequence: a forward round and its two backward rounds, a fused and a split
# forward round. Starting it 1..5 rounds before a wrap point puts each of them on the point once.
WRAP_SEQUENCE = ("backward", "fused", "split")
WRAP_SEQUENCE_ROUNDS = 5
WRAP_AFTER = 2000
KIND_WEIGHTS = {"fused": 60, "split": 20, "backward": 20, "pair": 20}


@dataclasses.dataclass(frozen=True)
class Profile:
    shapes: Sequence[Shape]
    rounds: int
    check_every: int
    wrap_shapes: Sequence[int] = ()  # indices into shapes
    wrap_points: Sequence[int] = ()
    fixed: bool = False  # a fixed list of checked rounds per shape (sanitize) instead of a random mix

    def only(self, keep: Sequence[int]) -> "Profile":
        """The same profile on some of its shapes (tools/soak.py --shapes: to dwell on one that
        failed); a kept wrap shape still wraps."""
        wrap = tuple(keep.index(j) for j in self.wrap_shapes if j in keep)
        return dataclasses.replace(self, shapes=tuple(self.shapes[j] for j in keep), wrap_shapes=wrap)


SANITIZE = Profile(
    shapes=(
        Shape(2, 2, 64, 8, bf16, "padded"),
        Shape(2, 3, 64, 8, fp32, "packed", alignment=4),
        Shape(2, 2, 64, 8, fp16, "packed", num_sms=2),
        Shape(2, 3, 208, 8, bf16, "packed", alignment=4, fp8=e4m3fn),  # two scale blocks, the last short
        Shape(2, 2, 64, 8, fp32, "padded", fp8=e4m3fnuz),
        # combine split into units (EpConfig::combine_parts): 3 chunks a row on NVIDIA, the last one
        # short (2 on AMD), 2 or 3 parts a token group by the source's T
        Shape(2, 4, 2880, 8, bf16, "padded", num_sms=16),
        Shape(2, 2, 64, 8, bf16, "packed", buffers=2),  # two rounds in flight
    ),
    rounds=0,
    check_every=1,
    fixed=True,
)

PROFILES = {
    "soak": Profile(
        shapes=(
            Shape(4, 2, 512, 64, bf16, "padded"),
            Shape(4, 4, 1024, 128, bf16, "packed"),
            Shape(8, 8, 2048, 256, fp16, "packed", alignment=16),
            Shape(2, 3, 256, 32, fp32, "padded", num_sms=3),
            Shape(32, 8, 7168, 64, bf16, "packed"),  # DeepSeek-V3's experts and hidden at world 8
            Shape(1, 1, 128, 16, fp16, "padded"),
            Shape(16, 6, 2880, 128, bf16, "padded", num_sms=8),
            Shape(32, 8, 7168, 64, bf16, "packed", alignment=16, fp8=e4m3fn),  # fp8 dispatch, forward rounds
            Shape(4, 4, 1040, 32, fp16, "padded", fp8=e4m3fnuz),  # a short last scale block
            Shape(8, 4, 2048, 128, bf16, "packed", alignment=8, buffers=2),  # two rounds in flight
        ),
        rounds=100_000,
        check_every=1000,
        wrap_shapes=(0, 2),
        wrap_points=(1 << 40, 1 << 64),
    ),
    "short": Profile(
        shapes=(
            Shape(4, 2, 512, 64, bf16, "padded"),
            Shape(4, 4, 1024, 128, bf16, "packed", alignment=8),
            Shape(2, 3, 256, 32, fp32, "padded", num_sms=3),
            Shape(1, 1, 128, 16, fp16, "packed"),
            Shape(4, 4, 1040, 32, bf16, "packed", alignment=8, fp8=e4m3fn),
            Shape(4, 2, 512, 32, bf16, "padded", buffers=2),
        ),
        rounds=300,
        check_every=25,
        wrap_shapes=(0, 1),
        wrap_points=(1 << 64,),
    ),
    "sanitize": SANITIZE,
    # initcheck (tools/sanitize.sh): the same shapes with the experts on the host, forward rounds.
    "initcheck": dataclasses.replace(
        SANITIZE, shapes=tuple(dataclasses.replace(s, host_experts=True) for s in SANITIZE.shapes)
    ),
}


def draw_spec(rng: random.Random, shape: Shape, world: int, kind: Optional[str] = None) -> Spec:
    def tokens():
        u = rng.random()
        return 0 if u < 0.1 else shape.max_tokens if u < 0.3 else rng.randint(1, shape.max_tokens)

    return Spec(
        tokens=tuple(tokens() for _ in range(world)),
        routing=rng.choices(ROUTINGS, weights=(50, 35, 15))[0],
        masked=rng.choice((0.0, 0.0, 0.0, 0.1, 0.5, 1.0)),
        duplicates=rng.choice((0.0, 0.0, 0.3)),
        kind=kind or rng.choices(shape.kinds(), weights=[KIND_WEIGHTS[k] for k in shape.kinds()])[0],
        seed=rng.getrandbits(31),
        int64_ids=rng.random() < 0.5,
    )


def fixed_specs(shape: Shape, world: int) -> list:
    """Every kind of round with unused slots and duplicate ids, a rank without tokens, every
    token to one expert: few rounds, each checked (for the sanitizer, where rounds are slow)."""
    full = (shape.max_tokens,) * world
    one_empty = (0,) + full[1:]
    specs = [
        Spec(full, "uniform", masked=0.3, duplicates=0.3, kind=kind, seed=1 + i) for i, kind in enumerate(KINDS)
    ] + [
        Spec(one_empty, "skewed", kind="fused", seed=11, int64_ids=True),
        Spec(one_empty, "hot", kind="backward", seed=12),
        Spec(full, "hot", duplicates=1.0, kind="split", seed=13),
        Spec(one_empty, "uniform", masked=0.3, kind="pair", seed=14),  # the split calls, interleaved
    ]
    return [s for s in specs if s.kind in shape.kinds()]


class Tally:
    """What the rounds covered, for the summary."""

    def __init__(self):
        self.rounds = self.protocol_rounds = self.checked = self.gpu_checked = self.wrap_rounds = 0
        self.counts = {}

    def add(self, shape_index: int, spec: Spec, checked: bool):
        self.rounds += 1
        # forward, backward of combine, of dispatch; two forward rounds
        self.protocol_rounds += {"backward": 3, "pair": 2}.get(spec.kind, 1)
        self.checked += checked
        self.gpu_checked += not checked
        features = [f"kind {spec.kind}", f"routing {spec.routing}", f"shape {shape_index}"]
        features += ["masked slots"] if spec.masked else []
        features += ["duplicate ids"] if spec.duplicates else []
        features += ["a rank with 0 tokens"] if 0 in spec.tokens else []
        features += ["int64 ids"] if spec.int64_ids else []
        for f in features:
            self.counts[f] = self.counts.get(f, 0) + 1


def run(
    group,
    rank: int,
    world: int,
    device,
    profile: str = "short",
    shapes: Optional[Sequence[int]] = None,
    rounds: Optional[int] = None,
    check_every: Optional[int] = None,
    seed: int = 0,
    timeout_s: float = 5.0,
    max_seconds: Optional[float] = None,
    log: Callable[[str], None] = lambda line: None,
) -> dict:
    """Collective. Runs the profile; raises AssertionError on every rank at the first host-checked
    round that failed on any rank, or at the first host check after a round that failed its GPU
    checks. max_seconds: stop early (all ranks at the same round, decided at a host-checked
    round). shapes: run only these of the profile's shapes (indices). Returns a summary."""
    prof = PROFILES[profile] if shapes is None else PROFILES[profile].only(list(shapes))
    rounds = prof.rounds if rounds is None else rounds
    check_every = max(1, prof.check_every if check_every is None else check_every)
    start = time.monotonic()
    eps = [shape.build(group, world, device, timeout_s) for shape in prof.shapes]
    banks = [Bank(shape, world, rank, device) for shape in prof.shapes]
    tally = Tally()
    window = round_checks.Window(2 * check_every, device)  # a "pair" round is two rounds

    def gpu_checks_passed():
        """Collective: every rank raises if a round since the last call failed a GPU check."""
        agree(window.drain(), "the GPU checks", group)

    def checked(j, spec):
        gpu_checks_passed()
        check_round(eps[j], prof.shapes[j], spec, banks[j], rank, world, device, group)
        tally.add(j, spec, True)

    def gpu_checked(i, j, spec):
        if window.free() < 2:  # a guard: 2 slots a round between host checks always fit
            gpu_checks_passed()
        outcomes = run_round(eps[j], prof.shapes[j], spec, banks[j], rank, world, device)

        def what(o):  # called only for a failed round
            return f"round {i}: {describe(prof.shapes[j], o.spec)}"

        round_checks.record(window, outcomes, prof.shapes[j], banks[j], rank, world, what)
        tally.add(j, spec, False)

    try:
        if prof.fixed:
            for j, shape in enumerate(prof.shapes):
                for spec in fixed_specs(shape, world):
                    checked(j, spec)
        wrap_at = min(rounds // 2, WRAP_AFTER)
        for i in range(rounds):
            if i == wrap_at:
                tally.wrap_rounds = run_wrap(prof, eps, checked, world, seed)
            rng = random.Random(seed * 1_000_003 + i)
            j = rng.randrange(len(eps))
            spec = draw_spec(rng, prof.shapes[j], world)
            if i % check_every == 0 or i == rounds - 1:
                checked(j, spec)
                if i and i % (10 * check_every) == 0:
                    log(f"round {i}: {tally.checked} checked, {time.monotonic() - start:.0f} s")
                if max_seconds is not None and all_gather(time.monotonic() - start > max_seconds, group)[0]:
                    log(f"stopping after round {i}: the time is up")
                    break
            else:
                gpu_checked(i, j, spec)
        gpu_checks_passed()
        for ep in eps:
            ep.synchronize()
    finally:
        for ep in eps:
            ep.close()
    elapsed = time.monotonic() - start
    return dict(
        profile=profile,
        world=world,
        rounds=tally.rounds,
        protocol_rounds=tally.protocol_rounds,
        checked=tally.checked,
        gpu_checked=tally.gpu_checked,
        wrap_rounds=tally.wrap_rounds,
        seconds=round(elapsed, 1),
        rounds_per_s=round(tally.rounds / elapsed, 1) if elapsed > 0 else None,
        coverage=dict(sorted(tally.counts.items())),
        shapes=[describe_shape(s) for s in prof.shapes],
    )


def run_wrap(prof: Profile, eps, checked, world: int, seed: int) -> int:
    """Each wrap point, each wrap shape: the sequence started 1..5 rounds before the point, so
    that each of its 5 rounds lands on the point once; every round checked. Returns the rounds."""
    count = 0
    for j in prof.wrap_shapes:
        rng = random.Random(seed * 7919 + j)
        for point in prof.wrap_points:
            for before in range(1, WRAP_SEQUENCE_ROUNDS + 1):
                hooks.set_rounds(eps[j], point - before)  # the next round's epoch is point - before + 1
                for kind in WRAP_SEQUENCE:
                    checked(j, draw_spec(rng, prof.shapes[j], world, kind))
                count += WRAP_SEQUENCE_ROUNDS
    return count
