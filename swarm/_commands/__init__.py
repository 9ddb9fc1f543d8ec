"""One module per `swarm` subcommand; see `swarm.cli`."""
