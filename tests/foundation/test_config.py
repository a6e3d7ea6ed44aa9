"""Every YAML under scenarios/ composes against its schema; bad overrides fail clearly."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException

from pdsim.cli import check_overrides
from pdsim.config import GROUPS, Config, register_configs, to_config
from pdsim.paths import SCENARIOS_DIR

register_configs()
OPTIONS = sorted(
    (group, path.stem)
    for group in GROUPS
    for path in (SCENARIOS_DIR / group).glob("*.yaml")
)


@pytest.mark.parametrize(("group", "option"), OPTIONS)
def test_every_option_composes(group, option):
    with initialize_config_dir(str(SCENARIOS_DIR), version_base="1.3"):
        cfg = to_config(compose("config", overrides=[f"{group}={option}"]))
    assert isinstance(cfg, Config)
    assert isinstance(getattr(cfg, group), GROUPS[group])


def test_required_groups_have_options():
    groups = {g for g, _ in OPTIONS}
    assert groups == set(GROUPS)
    scenarios = {o for g, o in OPTIONS if g == "scenario"}
    assert {"rag", "chat", "code", "agent", "longctx", "mooncake_conversation", "mooncake_synthetic",
            "azure_code", "azure_conv"} <= scenarios


def test_issue_example_overrides():
    with initialize_config_dir(str(SCENARIOS_DIR), version_base="1.3"):
        cfg = to_config(compose("config", overrides=["scenario=rag", "cluster.prefill=3", "cluster.decode=5", "slo.ttft_s=2"]))
    assert (cfg.cluster.prefill, cfg.cluster.decode, cfg.slo.ttft_s) == (3, 5, 2.0)


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("scenario.workload.qpz=3", "scenario.workload.qpz"),
        ("scenario.qpz=3", "Key 'qpz' not in 'ScenarioConfig'"),
        ("seed=oops", "Value 'oops' of type 'str' could not be converted to Integer"),
        ("scenario=nosuch", "Could not find 'scenario/nosuch' (available: agent,"),
        ("cluster.prefill=1.5", "cluster.prefill=1.5"),
    ],
)
def test_bad_overrides_give_one_line(override, needle):
    message = check_overrides([override])
    assert message is not None and "\n" not in message
    assert needle in message


def test_typo_fails_at_compose_time():
    with initialize_config_dir(str(SCENARIOS_DIR), version_base="1.3"):
        with pytest.raises(ConfigCompositionException):
            compose("config", overrides=["cluster.prefil=3"])


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["+unknown.key=1"], "unknown config key 'unknown'"),
        (["+cluster.nosuch=3"], "unknown config key 'cluster.nosuch'"),
        (["+scenario.input.foo=2"], "unknown config key 'scenario.input.foo'"),
        (["slo.ttft_s=-1"], "slo: field 'ttft_s' must be > 0, got -1.0"),
        (["slo.attainment_target=1.5"], "slo: field 'attainment_target' must be in (0, 1], got 1.5"),
        (["cluster.prefill_tp=3"], "cluster: field 'prefill_tp' = 3 does not divide model llama3_8b's 32"),
        (["cluster=colocated4", "cluster.colocated_tp=5"], "field 'colocated_tp' = 5 does not divide"),
        (["slo.criterion=median"], "slo: field 'criterion' has unknown value 'median'"),
        (["search.max_probes=1"], "search: field 'max_probes' must be >= 2, got 1"),
        (["cluster.prefix_cache_tokens=-5"], "prefix_cache_tokens' must be >= 0"),
    ],
)
def test_values_out_of_range_give_one_line(overrides, needle):
    message = check_overrides(overrides)
    assert message is not None and "\n" not in message and needle in message


def test_compat_distserve_preset_and_user_overrides_win():
    with initialize_config_dir(str(SCENARIOS_DIR), version_base="1.3"):
        cfg = to_config(compose("config", overrides=["compat=distserve", "model=opt_13b", "slo.criterion=joint"]))
    c, p, s = cfg.cluster, cfg.perf, cfg.slo
    assert (c.kv_handoff, c.transfer_backend, c.prefill_emits_token) == ("prefill_end", "none", False)
    assert (p.kind, p.fitted_batch_floor, p.decode_context_offset_tokens) == ("fitted", False, 1)
    assert (s.ttft_definition, s.tpot_definition, s.criterion) == ("prefill_end", "distserve", "joint")
    assert cfg.policy.routing == "least_requests"
    with initialize_config_dir(str(SCENARIOS_DIR), version_base="1.3"):
        mooncake = to_config(compose("config", overrides=["slo.tpot_definition=tbt_mooncake"]))
    assert mooncake.record_token_times  # the TBT SLO needs the token times


def test_a_catalog_entry_that_is_not_a_mapping_is_refused_by_name(tmp_path):
    """A model or hardware YAML holding a list (not the fields of one entry) fails with one line
    naming the file, not an omegaconf traceback."""
    from pdsim.perf.catalog import load_model

    (tmp_path / "model").mkdir()
    bad = tmp_path / "model" / "listy.yaml"
    bad.write_text("- num_layers: 2\n- hidden_size: 8\n")
    with pytest.raises(ValueError, match=r"listy\.yaml: a model entry must be a mapping, got a list"):
        load_model("listy", tmp_path)
    with pytest.raises(FileNotFoundError, match=r"no model named 'absent'.*have \['listy'\]"):
        load_model("absent", tmp_path)
