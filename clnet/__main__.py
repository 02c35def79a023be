"""`python -m clnet devices` (or `clnet devices`): the OpenCL devices clnet can use."""
import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="clnet", description=__doc__)
    parser.add_argument("command", choices=["devices"], help="what to show")
    parser.parse_args(argv)
    from .cl.device import DeviceError, devices, print_table
    from .cl.runtime import runtime
    try:
        runtime()  # the device CLNET_DEVICE (or the default) selects, marked in the table
    except DeviceError as error:
        print_table()  # with no device at all, it says why and what to install
        if devices():
            print(f"clnet: {error}", file=sys.stderr)
        return 1
    print_table()
    return 0


if __name__ == "__main__":
    sys.exit(main())
