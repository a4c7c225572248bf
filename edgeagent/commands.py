"""``fedplane agent`` (the edge daemon) and ``fedplane bench agent``, as click commands.

The daemon's plain start skips click (see :mod:`edgeagent.entry`, which also pins
the environment before numpy or onnxruntime load); these commands give it the same
usage, help and errors as every other command.
"""

from __future__ import annotations

import click

from edgeagent import config as agent_config
from edgeagent import entry


def _options_help() -> str:
    lines = ["\b", "Configuration keys (YAML; $VAR expanded from the environment):"]
    for name, text, default in agent_config.options():
        lines.append(f"  {name} = {default!r}")
        lines.append(f"      {text}")
    return "\n".join(lines)


@click.command(epilog=_options_help(), context_settings={"max_content_width": 120})
@click.option("--config", "config_path", type=click.Path(dir_okay=False), required=True, help="agent.yaml to load")
@click.option("--check", is_flag=True, help="validate the configuration, load the policy model, say which, and exit")
def agent(config_path: str, check: bool) -> None:
    """Run the edge agent: gossip, placement claims, binding through the cluster back end."""
    try:
        config = agent_config.load(config_path)
    except agent_config.ConfigError as exc:
        raise click.UsageError(f"invalid configuration: {exc}") from None
    entry.run(config, config_path, check)


