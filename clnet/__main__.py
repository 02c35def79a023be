"""`python -m clnet devices` (or `clnet devices`): the OpenCL devices clnet can use."""
import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="clnet", description=__doc__)
    parser.add_argument("command", choices=["devices"], help="what to show")
    parser.parse_args(argv)
    from .cl.device import print_table
    from .cl.runtime import runtime
    runtime()  # the device CLNET_DEVICE (or the default) selects, marked in the table
    print_table()
    return 0


if __name__ == "__main__":
    sys.exit(main())
