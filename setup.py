"""The log cleaner's C loops (tidelog/log/_entry_walk.c) and the leader's walks over a v2
batch's records and over v0/v1 messages (tidelog/records/_record_walk.c); everything else
about the package is in pyproject.toml. `make install` builds them (gcc is in its Debian
packages). The extensions are optional: where no compiler is (the slim container images),
tidelog installs without them and runs its Python loops, which do the same
(tests/log/test_cleaner_equivalence.py, tests/records/test_validation.py)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("tidelog.log._entry_walk", ["tidelog/log/_entry_walk.c"], optional=True),
        Extension(
            "tidelog.records._record_walk", ["tidelog/records/_record_walk.c"], optional=True
        ),
    ]
)
