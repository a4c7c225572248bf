"""agent.yaml is validated on load: an unknown key or a bad value is an error naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from edgeagent import config
from fedplane.cli import main

README = Path(__file__).resolve().parents[2] / "edgeagent" / "README.md"


@pytest.mark.parametrize("raw,field", [
    ({"nod": "x"}, "nod"),
    ({"placement": {"claim_windw": 0.1}}, "placement.claim_windw"),
    ({"placement": {"claim_window": 0}}, "placement.claim_window"),
    ({"placement": {"claim_window": "fast"}}, "placement.claim_window"),
    ({"placement": {"candidates": -1}}, "placement.candidates"),
    ({"placement": {"candidates": True}}, "placement.candidates"),
    ({"gossip": {"seeds": ["10.0.0.1"]}}, "gossip.seeds[0]"),
    ({"gossip": {"seeds": "10.0.0.1:7946"}}, "gossip.seeds"),
    ({"gossip": {"bind": "nowhere"}}, "gossip.bind"),
    ({"backend": {"kind": "k8s"}}, "backend.kind"),
    ({"probe": {"arch": "sparc"}}, "probe.arch"),
    ({"probe": {"labels": {"zone": 3}}}, "probe.labels.zone"),
    ({"federation": {"enabled": "yes"}}, "federation.enabled"),
    ({"http": {"bind": "9464"}}, "http.bind"),
    ({"models": []}, "models"),
    ({"data_dir": ""}, "data_dir"),
    ({"journal_max_mib": 0}, "journal_max_mib"),
    ({"journal_max_mib": "big"}, "journal_max_mib"),
])
def test_bad_values_name_their_field(raw: dict[str, object], field: str) -> None:
    with pytest.raises(config.ConfigError) as caught:
        config.parse(raw)
    assert caught.value.field == field
    assert str(caught.value).startswith(field)


def test_defaults_and_environment_expansion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_IP", "10.1.2.3")
    path = tmp_path / "agent.yaml"
    path.write_text("node: edge-1\ngossip:\n  bind: ${POD_IP}:7946\n  seeds: [10.1.2.4:7946]\nplacement: {candidates: 0}\n")
    loaded = config.load(path)
    assert loaded.gossip.bind == "10.1.2.3:7946" and loaded.placement.candidates == 0
    assert loaded.placement.claim_window == config.PlacementSection().claim_window
    assert loaded.models_path == Path(loaded.data_dir) / "models"


def test_unreadable_or_invalid_yaml_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(config.ConfigError, match="cannot read"):
        config.load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("gossip: [unclosed\n")
    with pytest.raises(config.ConfigError, match="not valid YAML"):
        config.load(bad)
    top = tmp_path / "list.yaml"
    top.write_text("- 1\n")
    with pytest.raises(config.ConfigError, match="top level must be a mapping"):
        config.load(top)


def test_cli_reports_the_field_and_help_and_readme_document_every_option(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text("placement:\n  claim_window: -1\n")
    result = CliRunner().invoke(main, ["agent", "--config", str(path)])
    assert result.exit_code == 2 and "placement.claim_window" in result.output
    path.write_text("node: a\n")
    assert CliRunner().invoke(main, ["agent", "--config", str(path), "--check"]).exit_code == 0
    help_text = CliRunner().invoke(main, ["agent", "--help"]).output
    readme = README.read_text()
    for name, _, _ in config.options():
        assert name in help_text, f"{name} missing from --help"
        assert f"`{name}`" in readme, f"{name} missing from edgeagent/README.md"
