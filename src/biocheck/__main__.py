"""`python -m biocheck` = the `biocheck` command; launchers that take a module use it
(`accelerate launch --config_file configs/accelerate/multi_gpu.yaml -m biocheck train`)."""

from biocheck.cli import entry

if __name__ == "__main__":
    entry()
