"""The one thing pyproject.toml cannot declare on every setuptools it may meet: the
reader's native record decoder (tiered/reader/_record_columns.c). It is optional: where
it does not compile (no C compiler or Python headers) the install goes on and the reader
uses its pure-Python decoder (tiercel.tiered.reader.record_columns)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tiercel.tiered.reader._record_columns",
            ["tiered/reader/_record_columns.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
