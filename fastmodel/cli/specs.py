"""``fastmodel specs list|show|schema`` and ``fastmodel plans``: the built-in specs and the plans of a system."""

from __future__ import annotations

import json

import click

from fastmodel.cli.app import main
from fastmodel.cli.common import KIND_CHOICE, LIST_CHOICE, SHOW_CHOICE, SPEC_KINDS, OneLineGroup, Whole, friendly
from fastmodel.errors import FastmodelError, SpecError


@main.group(cls=OneLineGroup)
def specs():
    """The built-in spec files: list, show, and the JSON schema of a kind."""


@specs.command("list")
@click.argument("kind", required=False, type=LIST_CHOICE)
@friendly
def specs_list(kind):
    """List built-in specs (of one KIND, or all); a device file with the GPU names it answers to."""
    from fastmodel.spec.loader import builtin_names

    for k in [kind] if kind else SPEC_KINDS:
        click.echo(f"{k}s:")
        names = device_names() if k == "device" else {}
        for name in builtin_names(k):
            click.echo(f"  {name:16s} {', '.join(names[name])}" if names.get(name) else f"  {name}")


@specs.command("show")
@click.argument("name")
@click.option("--kind", type=SHOW_CHOICE, help="Which kind NAME is (needed only if ambiguous).")
@friendly
def specs_show(name, kind):
    """Print a built-in spec file (a device file also by a GPU name it answers to, e.g. B300)."""
    from fastmodel.errors import SpecError, nearest
    from fastmodel.spec.loader import builtin_names, builtin_text

    others = [k for k in SPEC_KINDS if k != "device" and name in builtin_names(k)]     # dgx-b200: the system
    if kind == "device" or (kind is None and not others):    # a GPU name (B300): its device file
        from fastmodel.spec.devices import device_files

        name = device_files().get(name.lower(), name)
    kinds = [kind] if kind else [k for k in SPEC_KINDS if name in builtin_names(k)]
    if len(kinds) > 1 and "device" in kinds:    # mi300x: the system; its device file with --kind device
        kinds.remove("device")
    if not kinds:
        every = [n for k in SPEC_KINDS for n in builtin_names(k)]
        if name.lower().endswith((".toml", ".json")) or "/" in name:
            raise SpecError(name, None, "specs show prints a built-in spec (fastmodel specs list), not a file; "
                                        "read the file itself")
        raise SpecError(None, None, f"no built-in spec {name!r}{nearest(name, every)}")
    if len(kinds) > 1:
        raise SpecError(None, None, f"{name!r} is a {' and a '.join(kinds)}; pass --kind")
    if name not in builtin_names(kinds[0]):
        elsewhere = [k for k in SPEC_KINDS if k != kinds[0] and name in builtin_names(k)]    # dgx-h100 --kind model
        said = f"; it is a built-in {elsewhere[0]} (--kind {elsewhere[0]})" if elsewhere else \
            nearest(name, builtin_names(kinds[0]))
        raise SpecError(None, None, f"no built-in {kinds[0]} {name!r}{said}")
    click.echo(builtin_text(kinds[0], name).rstrip())
    if kinds[0] == "system":
        for line in tier_lines(name):
            click.echo(line)


def device_names() -> dict[str, list[str]]:
    """Each built-in device file's name (specs/devices, without .toml) -> the GPU names it answers to."""
    from fastmodel.spec.devices import device_file_names

    return device_file_names()


def tier_lines(name: str) -> list[str]:
    """TOML comments listing a system's network tiers as loaded (so ``specs show`` output stays a spec file)."""
    from fastmodel.engines import load_system

    system = load_system(name)
    devices = getattr(system, "num_devices", None) or system.n_gpus
    lines = [f"# network tiers as loaded, {devices} devices (fastmodel/spec/network.py):"]
    lines += [f"#   tier {i}: {tier.describe(devices)}" for i, tier in enumerate(system.tiers)]
    return lines


@specs.command("schema")
@click.argument("kind", type=KIND_CHOICE)
@friendly
def specs_schema(kind):
    """Print the JSON Schema of a spec KIND (for editor completion and checks): model, system, task (training)
    or serve-task (a kind = "serve" task: its fields, defaults, units and bounds, as the loader checks them)."""
    if kind == "serve-task":     # the serving wing's own model (fastmodel/serve/spec.py)
        from fastmodel.serve.spec import serve_task_schema

        click.echo(json.dumps(serve_task_schema(), indent=2))
        return
    from fastmodel.madmax.spec.schema import json_schema

    click.echo(json.dumps(json_schema(kind), indent=2))


@main.command()
@click.option("--system", "-s", required=True, help="Built-in name or path.")
@click.option("--nodes", "num_nodes", type=Whole(min=1), help="Cluster size in nodes (default: the system's).")
@click.option("--model", "-m", help="Model (built-in name or path): plans of its family, e.g. the three "
              "components MLP/EMB/TRANSFORMER of dlrm-transformer, minus rules it breaks (DLRM tp with odd layers).")
@friendly
def plans(system, num_nodes, model):
    """List every legal 1-D/2-D plan of a system."""
    from fastmodel.engines import load_model, load_system
    from fastmodel.errors import PlanError
    from fastmodel.madmax.families import family_of
    from fastmodel.madmax.parallel.plans import enumerate_plans
    from fastmodel.madmax.parallel.rules import check_plan

    sys_spec = load_system(system, num_nodes=num_nodes)
    from fastmodel.lm.spec import ClusterSpec

    if isinstance(sys_spec, ClusterSpec):
        _real_world_plans(sys_spec, model)
        return
    model_spec = load_model(model) if model else None
    from fastmodel.lm.spec import LMSpec

    if isinstance(model_spec, LMSpec):
        raise FastmodelError(f"{model}: a real-world model: its plans are device meshes on a kind = \"cluster\" "
                             "system (e.g. -s dgx-h100); 'fastmodel specs list system' lists them")
    three = model_spec is not None and family_of(model_spec).has_transformer_component
    found = enumerate_plans(sys_spec.num_nodes, sys_spec.devices_per_node, transformer=three)
    if model_spec is not None:
        def legal(plan):
            try:
                check_plan(plan, sys_spec.num_devices, sys_spec.devices_per_node, model_spec)
                return True
            except PlanError:
                return False
        found = [plan for plan in found if legal(plan)]
    if not found:
        raise FastmodelError(f"{sys_spec.name} with {sys_spec.num_devices} device(s) has no legal plan (every degree must be > 1)")
    for plan in found:
        click.echo(f"{plan.shape:<{20 if three else 12}} {plan.label}")


def _real_world_plans(cluster, model) -> None:
    """``fastmodel plans`` of a real-world cluster: the device meshes the rule table allows for ``model``."""
    if not model:
        raise FastmodelError(f"{cluster.name}: a real-world cluster: its plans are device meshes (tp8.pp4) whose "
                             "legality depends on the model; pass --model (e.g. -m llama3.1-70b)")
    from fastmodel.lm.loader import load_lm_model
    from fastmodel.lm.rules import legal_meshes
    from fastmodel.lm.sweep import mesh_label

    try:
        lm = load_lm_model(model)
    except SpecError as error:    # its hint, "or semantics 'madmax'", is no option of this command
        if error.field != "model.family":
            raise
        raise SpecError(error.source, error.field, f"{error.reason.split(';')[0]}; {cluster.name} is a real-world "
                        "cluster: pair it with a family = \"lm\" model (e.g. -m llama3.1-70b), or list a MAD-Max "
                        "system's plans (e.g. -s dc-a)") from None
    found = legal_meshes(lm, cluster)
    if not found:
        raise FastmodelError(f"{lm.name} on {cluster.name} with {cluster.n_gpus} GPU(s) has no legal mesh")
    click.echo(f"# {lm.name} on {cluster.n_gpus} GPUs of {cluster.name}: meshes the rule table allows "
               "(dp fills the cluster; the global batch must still be a multiple of dp x micro_batch)")
    for mesh, dp in found:
        click.echo(f"{mesh_label(mesh):<16} dp{dp}")
