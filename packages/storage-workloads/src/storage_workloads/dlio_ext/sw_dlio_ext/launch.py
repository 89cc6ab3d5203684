"""Start DLIO (``dlio_benchmark.main.main``) with the extensions installed.

``python -m sw_dlio_ext.launch HYDRA_ARGS...`` takes the same arguments as ``dlio_benchmark``.
Before DLIO starts it:

1. adds ``parquet`` to DLIO's ``FormatType`` enum when DLIO lacks it (DLIO 2.0.0 does), so that
   ``dataset.format: parquet`` loads and DLIO lists ``*.parquet`` files;
2. routes ``GeneratorFactory.get_generator`` for parquet, tfrecord and jpeg to this package's
   generators (every other format keeps DLIO's own);
3. keeps the workload mapping DLIO loads on its ``ConfigArguments`` (attribute
   ``sw_workload_config``), where the generators and the reader find the keys DLIO itself does
   not read (``dataset.parquet``, ``checkpoint.num_checkpoints_write``, ...).

Reading goes through DLIO's own extension point, ``reader.reader_classname``, which the run
sets; checkpoints through ``checkpoint.checkpoint_mechanism_classname``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from sw_dlio_ext import RAW_CONFIG_ATTRIBUTE


def _generator(fmt: str) -> Callable[[], Any]:
    def make() -> Any:
        if fmt == "parquet":
            from sw_dlio_ext.parquet import ParquetGenerator

            return ParquetGenerator()
        if fmt == "tfrecord":
            from sw_dlio_ext.tfrecord import IndexedTFRecordGenerator

            return IndexedTFRecordGenerator()
        from sw_dlio_ext.jpeg import SizedJPEGGenerator

        return SizedJPEGGenerator()

    return make


_GENERATORS = {fmt: _generator(fmt) for fmt in ("parquet", "tfrecord", "jpeg")}


def add_format(enum: Any, value: str) -> Any:
    """The member of DLIO's ``FormatType`` for ``value``, added when the enum lacks it."""
    try:
        return enum(value)
    except ValueError:
        pass
    name = value.upper()
    member = object.__new__(enum)
    member._name_ = name
    member._value_ = value
    type.__setattr__(enum, name, member)
    enum._member_map_[name] = member
    enum._value2member_map_[value] = member
    enum._member_names_.append(name)
    if enum(value) is not member or str(member) != value:
        raise RuntimeError(f"could not add {value!r} to {enum.__name__}")
    return member


def _plain(config: Any) -> Any:
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(config, DictConfig | ListConfig):
            return OmegaConf.to_container(config, resolve=True)
    except ImportError:  # pragma: no cover - DLIO always has omegaconf
        pass
    return config


def install() -> None:
    """Install the extensions into the imported DLIO modules (idempotent)."""
    import dlio_benchmark.main as dlio_main
    from dlio_benchmark.common.enumerations import FormatType
    from dlio_benchmark.data_generator.generator_factory import GeneratorFactory

    add_format(FormatType, "parquet")
    if not getattr(GeneratorFactory, "_sw_dlio_ext", False):
        original = GeneratorFactory.get_generator

        def get_generator(type: Any) -> Any:
            make = _GENERATORS.get(getattr(type, "value", type))
            return make() if make is not None else original(type)

        GeneratorFactory.get_generator = staticmethod(get_generator)
        GeneratorFactory._sw_dlio_ext = True
    if not getattr(dlio_main.LoadConfig, "_sw_dlio_ext", False):
        load = dlio_main.LoadConfig

        def load_config(args: Any, config: Any) -> Any:
            result = load(args, config)
            setattr(args, RAW_CONFIG_ATTRIBUTE, _plain(config))
            return result

        load_config._sw_dlio_ext = True  # type: ignore[attr-defined]
        dlio_main.LoadConfig = load_config


def main() -> None:
    install()
    from dlio_benchmark.main import main as dlio

    dlio()


if __name__ == "__main__":
    main()
    sys.exit(0)
