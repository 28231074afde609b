"""tools/device_call.sh and tools/bounded.sh without a GPU: what a driver (and tools/gpu_run.sh's steps) get."""

import os
import re
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _seconds_line(line, text):
    """Whether `line` is log()'s "[Ns] text": N, the seconds since device_call.sh was sourced, is 0 unless
    the machine is slow enough that the step crossed a second (a loaded CI machine does)."""
    return re.fullmatch(r"\[\d+s\] " + re.escape(text), line) is not None


def _source_then(tmp_path, script, out=True):
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    if out:
        env["OUT"] = str(tmp_path / "out")
        (tmp_path / "out").mkdir()
    return subprocess.run(
        ["bash", "-c", "source tools/device_call.sh && " + script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_driver_gets_the_environment_the_log_and_the_logs_folder(tmp_path):
    done = _source_then(
        tmp_path, 'log "built rc=0"; echo "$NCCL_NVLS_ENABLE $PYTHONUNBUFFERED $L"; [ -d "$L" ] && echo made'
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    assert _seconds_line(lines[0], "built rc=0")
    assert lines[1] == f"0 1 {tmp_path / 'out' / 'logs'}" and lines[2] == "made"
    driver_log = (tmp_path / "out" / "driver.log").read_text().split("\n")
    assert _seconds_line(driver_log[-2], "built rc=0")  # after the machine's line (nvidia-smi's, or its absence)
    assert len(driver_log) == 3


def test_without_out_it_stops_and_says_why(tmp_path):
    done = _source_then(tmp_path, "echo went on", out=False)
    assert done.returncode != 0 and "went on" not in done.stdout
    assert "OUT is not set" in done.stderr


def test_ab_runs_graph_ab_bounded_and_keeps_its_table(tmp_path):
    """`ab` with a stand-in tools/graph_ab.sh: the arguments it passes, the log line, compare.md copied."""
    fake = tmp_path / "repo"
    (fake / "tools").mkdir(parents=True)
    for name in ("device_call.sh", "no_multicast_env.sh", "bounded.sh"):
        (fake / "tools" / name).write_text(open(os.path.join(ROOT, "tools", name)).read())
    (fake / "tools" / "graph_ab.sh").write_text(
        'mkdir -p "$1" && echo "$AB_ROUNDS $2 $3" > "$1/compare.md"; echo timed; exit 3\n'
    )
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    env["OUT"] = str(tmp_path / "out")
    (tmp_path / "out").mkdir()
    done = subprocess.run(
        ["bash", "-c", 'source tools/device_call.sh && AB_ROUNDS=2 ab pf 30 .exp/base .exp/pf; echo "status $?"'],
        cwd=fake,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.split("\n")[:2]
    assert _seconds_line(first, "ab pf rc=3") and second == "status 3"
    assert (tmp_path / "out" / "compare-pf.md").read_text() == "2 .exp/base .exp/pf\n"
    assert (tmp_path / "out" / "logs" / "pf.log").read_text() == "timed\n"


def test_bench_runs_torchrun_bounded_with_the_trees_package(tmp_path):
    """`bench` with a stand-in torchrun on PATH: its arguments, the package it imports, the log line."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "torchrun").write_text('#!/usr/bin/env bash\necho "$PYTHONPATH $*"; exit 4\n')
    (bin_dir / "torchrun").chmod(0o755)
    (tmp_path / "tree" / "python").mkdir(parents=True)
    done = _source_then(
        tmp_path,
        f"PATH={bin_dir}:$PATH BENCH_NPROC=2 BENCH_TREE={tmp_path / 'tree'} bench g 30 benchmarks/bench_graph.py "
        '--shapes "1,2,3,4"; echo "status $?"',
    )
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.split("\n")[:2]
    assert _seconds_line(first, "g rc=4") and second == "status 4"
    logged = (tmp_path / "out" / "logs" / "g.log").read_text()
    assert logged == (
        f"{tmp_path / 'tree' / 'python'} --nproc-per-node=2 benchmarks/bench_graph.py --shapes 1,2,3,4 "
        f"--out {tmp_path / 'out' / 'g'}\n"
    )


def test_soak_runs_the_soak_bounded_and_keeps_its_verdict(tmp_path):
    """`soak` with stand-ins for torchrun and nvidia-smi (two GPUs): its arguments, one GPU for more ranks than
    GPUs, the log line, and the lines kept loose: the result and a failure's, once each, without rank prefixes."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text('#!/usr/bin/env bash\nprintf "GPU 0\\nGPU 1\\n"\n')
    failed = "AssertionError: the GPU checks: rank 2: 1 of 9 rounds failed the GPU checks; the first: round 5: ['out']"
    (bin_dir / "torchrun").write_text(
        "#!/usr/bin/env bash\n"
        'echo "one GPU: $MOE_A2A_TEST_ONE_GPU; $*"\n'
        + "".join(
            f'echo "[rank{r}]: {failed}"\necho "[rank{r}]:   out on the host: 0 of 7 tokens off"\n' for r in range(3)
        )
        + 'echo "round 5: 4 checked"\nexit 1\n'
    )
    for tool in ("nvidia-smi", "torchrun"):
        (bin_dir / tool).chmod(0o755)
    done = _source_then(
        tmp_path,
        f'PATH={bin_dir}:$PATH; soak w3 3 30 --shapes 7 --seed 1; echo "status $?"; soak w2 2 30 --seed 0; true',
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    assert _seconds_line(lines[0], "soak w3 rc=1") and lines[1] == "status 1"
    assert (
        (tmp_path / "out" / "logs" / "w3.log")
        .read_text()
        .startswith("one GPU: 1; --nproc-per-node=3 tools/soak.py --shapes 7 --seed 1\n")
    )
    assert (
        (tmp_path / "out" / "logs" / "w2.log")
        .read_text()
        .startswith("one GPU: 0; --nproc-per-node=2 tools/soak.py --seed 0\n")
    )
    assert (tmp_path / "out" / "w3.txt").read_text() == f"{failed}\n  out on the host: 0 of 7 tokens off\n"


def test_bounded_kills_what_the_step_started_and_returns_its_status(tmp_path):
    # A step that starts a child of its own and outlives its bound: the child must go too (call 1 of
    # session 26 lost its A/B to a torchrun that outlived `timeout`), and the status says it was killed.
    # The child's name is made at run time, so that the pattern matches neither this script's text nor pgrep's.
    done = _source_then(
        tmp_path,
        'm=moe_a2a_bounded_$$; bounded 1 bash -c "exec -a $m sleep 30 & sleep 30"; echo "rc=$?"; sleep 0.3; '
        'pgrep -f "moe_a2a_bounded_[0-9]" > /dev/null && echo survived || echo gone; '
        'bounded 5 bash -c "exit 3"; echo "rc=$?"',
    )
    assert done.stdout.split() == ["rc=143", "gone", "rc=3"], done.stdout + done.stderr


def test_bounded_stops_torchrun_and_its_ranks(tmp_path):
    # torchrun starts each rank in a session of its own: a KILL to torchrun's group alone leaves the ranks
    # running (on a GPU node, holding their GPUs). Two CPU ranks that sleep past the bound must be gone after it.
    # The ranks' marker is made at run time, so that the pattern matches neither this script's text nor pgrep's.
    rank = tmp_path / "rank.py"
    rank.write_text("import time\ntime.sleep(120)\n")
    done = _source_then(
        tmp_path,
        "m=moe_a2a_rank_$$; BOUNDED_GRACE_S=20 bounded 12 python3 -m torch.distributed.run --nproc-per-node=2 "
        f'--master-port=0 {rank} $m; echo "rc=$?"; sleep 0.3; '
        'pgrep -f "moe_a2a_rank_[0-9]" > /dev/null && echo survived || echo gone',
    )
    subprocess.run(["pkill", "-9", "-f", "moe_a2a_rank_[0-9]"])  # leaves nothing behind if the check failed
    assert done.stdout.split()[-1] == "gone", done.stdout + done.stderr
    assert done.stdout.split()[-2] != "rc=0", done.stdout


def test_an_interrupted_script_takes_its_bounded_step_with_it(tmp_path):
    # bounded puts the step in a session of its own, so a Ctrl-C (or a TERM from a scheduler) to the script
    # no longer reaches the step by itself: bounded's trap must kill the step's group and end the script.
    marker = f"moe_a2a_interrupted_{os.getpid()}"
    script = tmp_path / "step.sh"
    script.write_text(
        f'source {ROOT}/tools/bounded.sh\nbounded 60 bash -c "exec -a {marker} sleep 60 & sleep 60"\necho went on\n'
    )
    for signal_name, status in (("TERM", 143), ("INT", 130)):
        running = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, text=True)
        for _ in range(100):  # until the step's child runs
            if subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0:
                break
            time.sleep(0.05)
        else:
            running.kill()
            raise AssertionError("the bounded step never started")
        subprocess.run(["kill", f"-{signal_name}", str(running.pid)], check=True)
        try:
            out, _ = running.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # the step's child holds the script's stdout: it survived
            subprocess.run(["pkill", "-9", "-f", marker])
            running.kill()
            out, _ = running.communicate()
        time.sleep(0.3)
        left = subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0
        assert (running.returncode, out, left) == (status, "", False), signal_name


def test_nested_bounded_steps_stop_the_inner_torchrun(tmp_path):
    # A driver bounds tools/gpu_run.sh, whose own steps are bounded: the outer bound's TERM reaches the inner
    # script, whose trap stops its torchrun and the ranks before the outer KILL comes.
    inner = tmp_path / "inner.sh"
    rank = tmp_path / "rank.py"
    rank.write_text("import time\ntime.sleep(120)\n")
    inner.write_text(
        f"source {ROOT}/tools/bounded.sh\n"
        "m=moe_a2a_nested_$$\n"
        f"bounded 60 python3 -m torch.distributed.run --nproc-per-node=2 --master-port=0 {rank} $m\n"
        "echo inner went on\n"
    )
    done = _source_then(
        tmp_path,
        f'BOUNDED_GRACE_S=20 bounded 12 bash {inner}; echo "rc=$?"; sleep 0.3; '
        'pgrep -f "moe_a2a_nested_[0-9]" > /dev/null && echo survived || echo gone',
    )
    subprocess.run(["pkill", "-9", "-f", "moe_a2a_nested_[0-9]"])  # leaves nothing behind if the check failed
    assert done.stdout.split()[-2:] == ["rc=143", "gone"], done.stdout + done.stderr
    assert "inner went on" not in done.stdout
