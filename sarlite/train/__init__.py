"""The torchrun training application: ``python -m sarlite.train --config X.yaml``."""
from .config import Config, ConfigError, load_config
from .loop import run

__all__ = ["Config", "ConfigError", "load_config", "run"]
