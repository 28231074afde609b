"""Every MoE model family of the installed transformers, and what moe_a2a's expert_parallel() does
with it: a Markdown table for docs/transformers.md.

    python3 tools/hf_moe_families.py            # no GPU, no download, about a minute

A family is a MoE family when its default config names more than one expert. Its model is built
from that config on the meta device (no memory, no weights) and looked at as expert_parallel()
looks at it: accepted where transformers runs its experts through the experts interface
(`moe_a2a.integrations.transformers.experts_modules`), refused otherwise, with the reason
expert_parallel() raises (`refusal`). Where the default config does not build, the modeling code
says whether an experts class is on the interface ("accepted (not built)"). Sub-configs (a family's
text or talker part, with no model class of their own) are left out. "tested" names the families
whose tiny models the tests run (tests/python/tiny_moe_models.py): "yes", on the CPU against
transformers' eager experts and on two GPUs against the unsharded model; "CPU", the CPU test only,
on the family's default config with its sizes shrunk (SHRUNK_NAMES; a multimodal family's language
model alone); none for a refused family (the test skips one that this transformers refuses).
"""

import importlib
import inspect
import os
import sys
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a few configs name hub backbones: no download
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(ROOT, "tests", "python")]

import transformers  # noqa: E402
from tiny_moe_models import NAMES as TESTED  # noqa: E402
from tiny_moe_models import SHRUNK_NAMES, meta_model  # noqa: E402
from tiny_moe_models import config_field as field  # noqa: E402
from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES  # noqa: E402

import moe_a2a.integrations.transformers as moe_tf  # noqa: E402

EXPERT_FIELDS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_routed_experts")
SUB_CONFIGS = ("text_config", "language_config", "llm_config", "thinker_config")


def expert_count(config) -> int:
    """The most experts the config (or its text sub-config) names; 0 if none."""
    configs = [config] + [field(config, a) for a in SUB_CONFIGS if field(config, a) is not None]
    found = 0
    for c in configs:
        for name in EXPERT_FIELDS:
            v = field(c, name)
            values = v if isinstance(v, (list, tuple)) else [v]
            found = max([found] + [x for x in values if isinstance(x, int)])
    return found if found > 1 else 0


def uses_experts_interface(config) -> bool:
    """Whether the family's modeling code puts an experts class on the experts interface."""
    package = type(config).__module__.rsplit(".", 1)[0]  # transformers.models.<family>
    try:
        module = importlib.import_module(f"{package}.modeling_{package.rsplit('.', 1)[1]}")
    except ImportError:
        return False
    return "@use_experts_implementation" in inspect.getsource(module)


def status(family: str):
    try:
        config = CONFIG_MAPPING[family]()
    except Exception:  # noqa: BLE001  (a config that needs arguments is no MoE default we can read)
        return None
    experts = expert_count(config)
    if not experts:
        return None
    model, error = meta_model(config)
    if model is None and "Unrecognized configuration class" in error:
        return None  # a sub-config (text, talker, ...) of a family listed on its own: no model of its own
    tested = "yes" if family in TESTED else ("CPU" if family in SHRUNK_NAMES else "")
    if model is None:
        if uses_experts_interface(config):
            why = f"its modeling code uses the experts interface; its default config does not build here ({error})"
            return experts, "accepted (not built)", why, tested
        why = f"its modeling code does not use the experts interface; its default config does not build here ({error})"
        return experts, "not classified", why, tested
    modules, blocks = moe_tf.experts_modules(model), moe_tf.scored_input_blocks(model)
    if modules:
        return experts, "accepted", f"{len(modules)} experts modules on the experts interface", tested
    if blocks:
        why = f"{len(blocks)} MoE blocks of Llama 4's kind (scores before the experts), on moe_a2a's own forward"
        return experts, "accepted", why, tested
    return experts, "refused", moe_tf.refusal(model).split("are not served: ", 1)[1], ""


def main() -> None:
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    rows = []
    for family in sorted(CONFIG_MAPPING_NAMES):
        found = status(family)
        if found is not None:
            rows.append((family, *found))
    print(f"MoE families of transformers {transformers.__version__} (tools/hf_moe_families.py):\n")
    print("| family | experts | expert_parallel() | why | tested |")
    print("|---|---|---|---|---|")
    for family, experts, verdict, why, tested in rows:
        print(f"| {family} | {experts} | {verdict} | {why} | {tested} |")
    counts = {
        v: sum(1 for r in rows if r[2] == v) for v in ("accepted", "accepted (not built)", "refused", "not classified")
    }
    print(f"\n{len(rows)} families: " + ", ".join(f"{n} {v}" for v, n in counts.items()))


if __name__ == "__main__":
    main()
