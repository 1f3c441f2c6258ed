from shardkit.cli import run

run()
