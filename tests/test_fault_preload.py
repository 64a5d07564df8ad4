"""Whether a process runs under libfiu's POSIX preload, from LD_PRELOAD as fiu-run sets it."""

from tidelog import fault_preload


def test_fiu_run_x_sets_the_posix_preload_which_a_process_sees() -> None:
    environment = {
        "LD_PRELOAD": "/usr/lib/fiu/fiu_run_preload.so  /usr/lib/fiu/fiu_posix_preload.so"
    }
    assert fault_preload.active(environment)


def test_fiu_run_without_x_and_no_preload_at_all_are_not_it() -> None:
    assert not fault_preload.active({"LD_PRELOAD": "/usr/lib/fiu/fiu_run_preload.so "})
    assert not fault_preload.active({})
