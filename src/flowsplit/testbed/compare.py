"""``flowsplit testbed compare``: the planner's gains measured on the emulated testbed.

    flowsplit testbed compare TOPOLOGY.toml DATASET -o gains.json [--seeds 0,1,2]

What a deployment would do, on a testbed built from ``TOPOLOGY`` (one node per role,
every link shaped, every node's CPU a quota in the topology's speed ratios):

1. ``flowsplit sfl probe`` runs once per node and writes the measured topology;
2. the planner plans on it (as ``sfl plan``, pilots on ``DATASET``): ``acc-aware`` and
   ``delay`` against HSFL at its fixed cuts with a random assignment (``hsfl``) and with
   the greedy assignment (``hsfl-greedy``), for every seed;
3. every plan runs for real (``sfl run --plan PLAN --mode dist --probe``, one role per
   node); its total measured delay (the rounds' measured wall times) and bytes are
   compared with HSFL's and hsfl-greedy's, paired by seed: the mean relative difference
   and its 95 % t interval over the seeds, beside the predicted differences (the
   planner's closed-form delay, and the replay of the run's own messages).

With ``--truth`` the accuracy-aware plan is also made from the true topology (the same
pilots) and run: the probe's plan against the truth's. Needs root.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from flowsplit.choices import ModelChoice, seeds_field
from flowsplit.config_args import cli

METHODS = ("acc-aware", "delay", "hsfl", "hsfl-greedy")


@dataclass
class CompareOptions(ModelChoice):
    """What ``testbed compare`` plans and runs (its options). The model and the fields
    named as a planning study's (:class:`~flowsplit.planner.study_config.StudyConfig`,
    its ``[run]`` fields flat) are the study's (:meth:`study_config`); the others
    (:data:`TESTBED_FIELDS`) are the testbed's."""

    CLI_GROUP: ClassVar[str | None] = None
    TESTBED_FIELDS: ClassVar[tuple[str, ...]] = (
        "seeds",
        "truth",
        "cpu_budget",
        "max_cpu",
        "timeout_s",
    )
    """Fields of the comparison on the testbed, not of the study it plans with."""

    seeds: tuple[int, ...] = seeds_field((0, 1, 2), " (at least 2)")
    rounds: int = field(default=2, metadata=cli(help="rounds per run"))
    batch_size: int = field(default=16, metadata=cli(help="samples per client batch"))
    train_limit: int = field(default=384, metadata=cli(metavar="N", help="training rows per run"))
    n_pilots: int = field(
        default=3, metadata=cli(flag="--pilots", metavar="N", help="the planner's pilot cut pairs")
    )
    pilot_steps: int = field(default=24, metadata=cli(help="optimiser steps per pilot"))
    truth: bool = field(default=False, metadata=cli(help="also run a plan from TOPOLOGY itself"))
    cpu_budget: float = field(default=1.6, metadata=cli(parse=float, help="cores all nodes share"))
    max_cpu: float = field(default=0.3, metadata=cli(parse=float, help="cores of the fastest node"))
    timeout_s: float = field(default=240.0, metadata=cli(enabled=False))
    """Seconds each probe or run on the testbed may take."""

    def study_config(self, topology_file: str | Path) -> Any:
        """The planning study's config on ``topology_file``: the fields a study has
        (model, rounds, batch size and rows of the runs, the pilots), its defaults for
        the rest (HSFL at cuts 1,2; pilots on the runs' rows). The model is in it too: a
        plan's run takes its model from it (``sfl run --plan`` runs the planned model)."""
        from flowsplit.planner.study import resolve_study_config

        study = {k: v for k, v in asdict(self).items() if k not in self.TESTBED_FIELDS}
        return resolve_study_config(False, **study, topology=str(topology_file))

    def settings(self) -> dict[str, Any]:
        """The options as the comparison's document records them."""
        return asdict(self) | {"seeds": list(self.seeds)}


def run_roles(
    tb: Any,
    argv: list[str],
    out: Path,
    *,
    port: int,
    timeout_s: float,
    env: dict[str, str] | None = None,
) -> list[int]:
    """``argv`` once per node (torchrun's environment, rank = node order, each role bound
    to its node's address), each role joining its node's cgroup once it has started up
    (imports and data without the quota); logs in ``OUT-logs/<node>.log``; exit codes."""
    procs = []
    logs = out.parent / f"{out.name}-logs"
    logs.mkdir(parents=True, exist_ok=True)
    for name, node in tb.nodes.items():
        # `ip netns exec` gives the role a /sys without cgroups: it joins its node's
        # cgroup through a descriptor opened here.
        fd = os.open(node.cgroup / "cgroup.procs", os.O_WRONLY)
        role_env = {
            **tb.rank_env(name, master_port=port),
            "OMP_NUM_THREADS": "1",
            "FLOWSPLIT_JOIN_CGROUP": f"fd:{fd}",
            "FLOWSPLIT_MEASURED_ON": "testbed",
            **(env or {}),
        }
        try:
            with open(logs / f"{name}.log", "wb") as fh:
                procs.append(
                    tb.spawn(
                        name,
                        [*argv, "--bind", node.address],
                        env=role_env,
                        cgroup=False,
                        stdout=fh,
                        stderr=subprocess.STDOUT,
                        pass_fds=(fd,),
                    )
                )
        finally:
            os.close(fd)
        # Start-up in the testbed's own cgroup: no quota, its high CPU weight.
        (node.cgroup.parent / "cgroup.procs").write_text(str(procs[-1].pid))
    return tb.wait(procs, timeout_s=timeout_s)


def _model_args(choice: ModelChoice) -> list[str]:
    """The model options of every ``sfl`` command the roles run (``--model-option``
    texts: a value as JSON, a text as it is)."""
    out = ["--model", choice.model] + (["--view", choice.view] if choice.view else [])
    for k, v in choice.model_options.items():
        out += ["--model-option", f"{k}={v if isinstance(v, str) else json.dumps(v)}"]
    return out


def probe(
    tb: Any, topo_file: Path, out_toml: Path, dataset: str, opts: CompareOptions, port: int
) -> dict:
    """``sfl probe`` on every node; the probe's JSON (``out_toml`` is written)."""
    argv = ["flowsplit", "sfl", "probe", str(dataset), "--topology", str(topo_file)]
    argv += [*_model_args(opts), "--cuts", "1,2"]
    argv += ["--batch-size", str(opts.batch_size), "--train-limit", str(opts.train_limit)]
    argv += ["-o", str(out_toml), "--quiet"]
    codes = run_roles(tb, argv, out_toml.parent / "probe-run", port=port, timeout_s=opts.timeout_s)
    if any(codes) or not out_toml.is_file():
        raise RuntimeError(f"the probe failed (exit codes {codes}; logs beside {out_toml})")
    return json.loads(out_toml.with_suffix(".json").read_text())


def make_plans(
    topology_file: Path,
    seeds: list[int],
    dataset: str,
    opts: CompareOptions,
    work: Path,
    study=None,
    tag: str = "",
) -> dict:
    """Plan files per (method, seed) on ``topology_file`` and their predicted costs;
    ``study``: one made already (its pilots and surrogate) to plan on this topology."""
    from dataclasses import replace

    from flowsplit.federated.setup import RegistryModel
    from flowsplit.federated.system.topology import read_topology
    from flowsplit.planner.commands import _plan_document
    from flowsplit.planner.study import jsonable, make_study, plan_seed

    cfg = opts.study_config(topology_file)
    fn = RegistryModel(cfg.model, cfg.view, cfg.model_options)
    t0 = time.perf_counter()
    if study is None:
        study = make_study(dataset, cfg, model_fn=fn, quiet=True, seed=seeds[0])
    else:
        study = replace(study, topology=read_topology(topology_file))
    out: dict = {"planning_s": None, "plans": {}, "study": study}
    for seed in seeds:
        plans = plan_seed(study, seed)
        for m in METHODS:
            doc = _plan_document(study, cfg, {**plans, "acc-aware": plans[m]}, seed, 0.0)
            path = work / f"plan-{topology_file.stem}{tag}-{m}-{seed}.json"
            path.write_text(json.dumps(jsonable(doc)))
            p = plans[m]
            out["plans"][(m, seed)] = {
                "file": path,
                "cuts": list(p.cuts),
                "scheme": p.scheme,
                "predicted_delay_s": float(p.delay_s),
                "predicted_bytes": float(p.bytes),
                "assignment": [int(a) for a in p.assignment],
            }
    out["planning_s"] = time.perf_counter() - t0
    return out


def run_plan(
    tb: Any, plan_file: Path, out: Path, dataset: str, opts: CompareOptions, port: int
) -> dict:
    """``sfl run --plan`` on every node: measured and replayed delay, bytes."""
    argv = ["flowsplit", "sfl", "run", str(dataset), "--plan", str(plan_file)]
    argv += ["--mode", "dist", "--probe", *_model_args(opts)]
    argv += ["--rounds", str(opts.rounds), "--timeout", "60"]
    argv += ["-o", str(out), "--quiet", "--overwrite"]
    codes = run_roles(tb, argv, out, port=port, timeout_s=opts.timeout_s)
    if any(codes) or not (out / "metrics.json").is_file():
        return {"error": f"exit codes {codes}"}
    m = json.loads((out / "metrics.json").read_text())
    rounds = m["rounds"]
    return {
        "measured_delay_s": float(sum(r["measured_round_s"] for r in rounds)),
        "predicted_replay_s": float(sum(r["predicted_round_s"] for r in rounds)),
        "bytes": int(m["bytes_total"]),
        "accuracy": m.get("accuracy"),
        "rounds": len(rounds),
    }


def paired(values: dict, base: str, key: str, seeds: list[int]) -> dict:
    """Per method: the mean relative difference of ``key`` against ``base`` over the
    seeds (paired by seed) and its 95 % t interval."""
    import numpy as np
    from scipy import stats

    out = {}
    for m in METHODS:
        if m == base:
            continue
        rel = []
        for s in seeds:
            a, b = values.get((m, s), {}).get(key), values.get((base, s), {}).get(key)
            if a is not None and b:
                rel.append(a / b - 1)
        if len(rel) < 2:
            out[m] = {"n": len(rel), "mean": rel[0] if rel else None}
            continue
        mean, sd = float(np.mean(rel)), float(np.std(rel, ddof=1))
        half = float(stats.t.ppf(0.975, len(rel) - 1)) * sd / math.sqrt(len(rel))
        out[m] = {"n": len(rel), "mean": mean, "ci95": [mean - half, mean + half]}
    return out


def compare_on_testbed(
    topology_file: Path,
    dataset: str,
    work: Path,
    opts: CompareOptions | None = None,
    *,
    port: int = 29900,
    log=print,
) -> dict:
    """Probe, plan and run every plan of ``opts`` (default: :class:`CompareOptions`'s)
    on a testbed of ``topology_file``; the document ``flowsplit testbed compare``
    writes (see the module doc)."""
    from flowsplit.federated.system.topology import read_topology
    from flowsplit.testbed.bed import Testbed
    from flowsplit.testbed.spec import TestbedSpec

    opts = CompareOptions() if opts is None else opts
    seeds, dataset = list(opts.seeds), str(dataset)
    work.mkdir(parents=True, exist_ok=True)
    topo = read_topology(topology_file)
    spec = TestbedSpec.from_topology(topo, cpu_budget=opts.cpu_budget, max_cpu=opts.max_cpu)
    log(f"testbed: {len(spec.nodes)} nodes, {sum(n.cpu or 0 for n in spec.nodes):.2f} cores")
    with Testbed(spec) as tb:
        probed_file = work / "probe" / "probed.toml"
        probed_file.parent.mkdir(parents=True, exist_ok=True)
        probe_doc = probe(tb, topology_file, probed_file, dataset, opts, port)
        log(f"probed: {probed_file}")
        planned = make_plans(probed_file, seeds, dataset, opts, work)
        log(f"planned in {planned['planning_s']:.0f} s")
        results = _run_plans(tb, planned, dataset, opts, work, port, log)
        truth_run = (
            _run_truth_plan(tb, Path(topology_file), planned, dataset, opts, work, port, log)
            if opts.truth
            else {}
        )
    doc = _document(topology_file, opts, probe_doc, results)
    if truth_run:
        doc["probe_vs_truth"] = _probe_vs_truth(results.get(("acc-aware", seeds[0]), {}), truth_run)
    return doc


def _run_plans(
    tb, planned: dict, dataset: str, opts: CompareOptions, work: Path, port: int, log
) -> dict:
    """Every plan of ``planned`` run for real on ``tb``: (method, seed) -> plan and run."""
    results = {}
    for (m, seed), info in planned["plans"].items():
        port += 1
        row = run_plan(tb, info["file"], work / f"run-{m}-{seed}", dataset, opts, port)
        results[(m, seed)] = {**info, **row}
        got = row.get("measured_delay_s")
        log(f"{m:12s} seed {seed} cuts {info['cuts']}: " + (
            f"measured {got:.2f} s" if got is not None else row.get("error", "")))  # fmt: skip
    return results


def _run_truth_plan(
    tb, topology_file: Path, planned: dict, dataset: str, opts: CompareOptions, work, port, log
):
    """The accuracy-aware plan made from the true topology (same pilots), run on ``tb``
    (the first seed's)."""
    seed = opts.seeds[0]
    from_truth = make_plans(
        topology_file, [seed], dataset, opts, work, study=planned["study"], tag="-truth"
    )
    info = from_truth["plans"][("acc-aware", seed)]
    port += len(planned["plans"]) + 1
    row = run_plan(tb, info["file"], work / "run-truth", dataset, opts, port)
    log(f"truth plan cuts {info['cuts']}: {row}")
    return {**info, **row}


def _document(topology_file, opts: CompareOptions, probe_doc: dict, results: dict) -> dict:
    """The comparison's document: runs, and measured and predicted gains paired by seed."""
    seeds = list(opts.seeds)
    rows = [
        {"method": m, "seed": s, **{k: v for k, v in r.items() if k not in ("file", "assignment")}}
        for (m, s), r in results.items()
    ]
    return {
        "topology": str(topology_file),
        "settings": opts.settings(),
        "probe": probe_doc,
        "runs": rows,
        "measured_vs_hsfl": {
            "delay": paired(results, "hsfl", "measured_delay_s", seeds),
            "bytes": paired(results, "hsfl", "bytes", seeds),
        },
        "measured_vs_hsfl_greedy": {
            "delay": paired(results, "hsfl-greedy", "measured_delay_s", seeds),
            "bytes": paired(results, "hsfl-greedy", "bytes", seeds),
        },
        "predicted_vs_hsfl": {
            "delay_closed_form": paired(results, "hsfl", "predicted_delay_s", seeds),
            "delay_replay": paired(results, "hsfl", "predicted_replay_s", seeds),
            "bytes": paired(results, "hsfl", "predicted_bytes", seeds),
        },
        "predicted_vs_hsfl_greedy": {
            "delay_closed_form": paired(results, "hsfl-greedy", "predicted_delay_s", seeds),
            "delay_replay": paired(results, "hsfl-greedy", "predicted_replay_s", seeds),
        },
    }


def _probe_vs_truth(probe_run: dict, truth_run: dict) -> dict:
    """The probe's accuracy-aware plan against the truth's: cuts, measured delay, difference."""
    return {
        "probe_plan": {k: probe_run.get(k) for k in ("cuts", "measured_delay_s")},
        "truth_plan": {k: truth_run.get(k) for k in ("cuts", "measured_delay_s")},
        "same_plan": probe_run.get("cuts") == truth_run.get("cuts")
        and probe_run.get("assignment") == truth_run.get("assignment"),
        "rel_difference": (
            probe_run["measured_delay_s"] / truth_run["measured_delay_s"] - 1
            if probe_run.get("measured_delay_s") and truth_run.get("measured_delay_s")
            else None
        ),
    }


def gains_lines(doc: dict) -> list[str]:
    """The measured gains against HSFL and hsfl-greedy in words (one line per plan)."""
    lines = []
    for base, key in (("HSFL", "measured_vs_hsfl"), ("hsfl-greedy", "measured_vs_hsfl_greedy")):
        pred = doc[key.replace("measured", "predicted")]["delay_replay"]
        for m, v in doc[key]["delay"].items():
            if v.get("mean") is None:
                continue
            ci = v.get("ci95")
            ci_s = f" (95 % CI {ci[0]:+.0%} to {ci[1]:+.0%})" if ci else ""
            p = pred.get(m, {}).get("mean")
            p_s = f"; predicted (replay) {p:+.0%}" if p is not None else ""
            lines.append(
                f"{m} vs {base}: measured delay {v['mean']:+.0%}{ci_s} over {v['n']} seeds{p_s}"
            )
    return lines
