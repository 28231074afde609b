"""The GPU tests run at any world from 2 to 8 (a node's GPUs, or tools/gpu_run.sh's ONE_GPU_RANKS ranks on
one GPU), so none of them may build an AllToAll, MultiNodeAllToAll or ExpertParallelMoE with a number of
experts written into its code: a world that does not divide it refuses it (the forty-third session found
75 tests that could not run at world 3 so). The number must come from the world (8 * world,
experts_for(E, world)) or from a shape the test skips where it does not split (fits)."""

import ast
import pathlib

TESTS = pathlib.Path(__file__).resolve().parents[1]
# The classes that take a number of experts, and its position among their arguments.
BUILDERS = {"AllToAll": 1, "MultiNodeAllToAll": 1, "ExpertParallelMoE": 2}


def experts_argument(call):
    """The expression a call to one of BUILDERS passes as num_experts, or None."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in BUILDERS:
        return None
    for keyword in call.keywords:
        if keyword.arg == "num_experts":
            return keyword.value
    position = BUILDERS[name]
    return call.args[position] if len(call.args) > position else None


def is_int(node):
    return isinstance(node, ast.Constant) and isinstance(node.value, int)


def literal_names(function):
    """The names `function` binds to an integer literal, alone or in a tuple (E, K = 64, 6)."""
    names = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs = zip(target.elts, node.value.elts)
                else:
                    pairs = [(target, node.value)]
                names |= {t.id for t, v in pairs if isinstance(t, ast.Name) and is_int(v)}
    return names


def fixed_experts(tree):
    """(line, function) of each call in `tree` whose number of experts is an integer literal, or a name
    its function binds to one."""
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        fixed = literal_names(function)
        for node in ast.walk(function):
            experts = experts_argument(node) if isinstance(node, ast.Call) else None
            if experts is not None and (is_int(experts) or (isinstance(experts, ast.Name) and experts.id in fixed)):
                found.append((node.lineno, function.name))
    return sorted(set(found))


def test_the_check_finds_fixed_experts():
    tree = ast.parse(
        "def a(world):\n    E, K = 64, 6\n    moe_a2a.AllToAll(g, E, K)\n"
        "def b(world):\n    ExpertParallelMoE(8, 16, num_experts=32)\n"
        "def c(world):\n    E = 8 * world\n    AllToAll(g, E, 2)\n    MultiNodeAllToAll(g, experts_for(64, world), 2)\n"
    )
    assert fixed_experts(tree) == [(3, "a"), (5, "b")]


def test_no_gpu_test_fixes_its_number_of_experts():
    files = sorted((TESTS / "gpu").glob("*.py")) + [TESTS / "multinode_worker.py"]
    found = [
        f"{path.name}:{line} ({name})" for path in files for line, name in fixed_experts(ast.parse(path.read_text()))
    ]
    assert not found, "experts fixed in the code (use experts_for(E, world) or a multiple of world): " + ", ".join(
        found
    )
