"""The study's nested configuration (``StudyConfig.run`` and ``.planner``): what each
section hands to the runs and the plans, the keyword and file forms it accepts, and the
results of studies written before it had sections."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from flowsplit.errors import ConfigError
from flowsplit.experiments.sfl.compare import resolve_config
from flowsplit.experiments.sfl.result import flat_config, read_sfl_compare_result
from flowsplit.federated.config import SFLConfig
from flowsplit.planner.plan import PlannerConfig
from flowsplit.planner.study import base_config, planner_config
from flowsplit.planner.study_config import StudyConfig, StudyPlannerConfig, StudyRunConfig


def test_every_run_setting_is_a_field_of_the_runs_config():
    # Prepare: the fields of the run section and of SFLConfig.
    run_fields = {f.name for f in fields(StudyRunConfig)}
    # Assert: the section is handed over whole, so each of its fields is an SFLConfig's.
    assert run_fields <= {f.name for f in fields(SFLConfig)}
    cfg = resolve_config(True, rounds=3, lr=0.01, clients_per_round=2, partition="site")
    run = base_config(cfg, 7)
    assert (run.rounds, run.lr, run.clients_per_round, run.partition) == (3, 0.01, 2, "site")
    assert (run.seed, run.scheme, run.cuts) == (7, cfg.planner.family, cfg.planner.fixed_cuts)


def test_the_plans_take_the_fields_the_planner_shares_with_the_study():
    # Prepare: a study whose shared fields all differ from PlannerConfig's defaults.
    cfg = StudyConfig(
        run=StudyRunConfig(batch_size=8, local_epochs=2),
        planner=StudyPlannerConfig(
            family="hsfl-ll",
            fixed_cuts=(2, 3),
            reference="median",
            capacity=(3, 3),
            three_tier=True,
            acc_tolerance=0.05,
            only_cuts=((1, 2),),
            weights=(0.0, 2.0, 1.0),
        ),
    )
    # Execute
    pc = planner_config(cfg, 4)
    # Assert: the nine fields PLANNER_FIELDS used to name, the seed; the weights are the
    # plan's (a tuple in the study), and excluded fields keep PlannerConfig's defaults.
    assert (pc.batch_size, pc.local_epochs, pc.family, pc.fixed_cuts) == (8, 2, "hsfl-ll", (2, 3))
    assert (pc.reference, pc.capacity, pc.three_tier) == ("median", (3, 3), True)
    assert (pc.acc_tolerance, pc.only_cuts, pc.seed) == (0.05, ((1, 2),), 4)
    assert pc.weights == PlannerConfig().weights
    loose = planner_config(cfg, 4, exclude=("three_tier", "acc_tolerance"))
    assert (loose.three_tier, loose.acc_tolerance) == (False, PlannerConfig().acc_tolerance)


def test_options_name_a_sections_field_flat_or_in_its_table():
    # Execute: the same settings as flat keywords and as tables.
    flat = resolve_config(True, rounds=3, family="hsfl-ll", seeds=(4,))
    tables = resolve_config(True, run={"rounds": 3}, planner={"family": "hsfl-ll"}, seeds=(4,))
    # Assert: one config; the quick recipe fills the rest of the section.
    assert flat == tables and flat.run.train_limit == 600
    with pytest.raises(ConfigError, match="given twice"):
        resolve_config(rounds=3, run={"rounds": 4})
    with pytest.raises(ConfigError, match="unknown option"):
        resolve_config(roundz=3)


def test_a_study_written_before_the_sections_reads_as_one_written_after(toy_sfl_study):
    # Prepare: the study's results.json, and the same file as studies wrote it before
    # the config had sections (every field at the top of "config").
    path = toy_sfl_study / "results.json"
    doc = json.loads(path.read_text())
    assert set(doc["config"]["run"]) == {f.name for f in fields(StudyRunConfig)}
    old = toy_sfl_study.parent / "old-study"
    old.mkdir(exist_ok=True)
    flat = {k: v for k, v in doc["config"].items() if k not in ("run", "planner")}
    flat |= doc["config"]["run"] | doc["config"]["planner"]
    (old / "results.json").write_text(json.dumps({**doc, "config": flat}))
    # Execute
    new_settings = read_sfl_compare_result(path).settings
    old_settings = read_sfl_compare_result(old).settings
    # Assert: the same settings from both shapes, and they are the study's.
    assert new_settings == old_settings
    assert (new_settings.rounds, new_settings.family, new_settings.seeds) == (2, "hsfl", [0, 1])
    assert flat_config(doc["config"]) == flat_config(flat)
