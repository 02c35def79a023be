"""Device discovery and choice.

The default device is the first GPU, else the newest PoCL CPU device: with both the pip and
Debian PoCL installed, pyopencl lists two CPU platforms, and the newer PoCL runs our kernels
about three times faster, so "platform 0" is not a choice we leave to the installation order.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass

import pyopencl as cl


class DeviceError(RuntimeError):
    """No usable OpenCL device, or the one asked for does not exist or lacks a feature."""


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    vendor: str
    platform: str
    platform_version: str
    driver: str
    type: str
    compute_units: int
    global_mem: int
    local_mem: int
    max_work_group: int
    fp64: bool
    cl_device: cl.Device

    @property
    def is_gpu(self) -> bool:
        return self.type == "GPU"

    def describe(self) -> str:
        return f"{self.name} [{self.platform_version.strip()}, driver {self.driver}]"


def _type_name(device_type: int) -> str:
    for name in ("GPU", "CPU", "ACCELERATOR"):
        if device_type & getattr(cl.device_type, name):
            return name
    return "OTHER"


def devices() -> list[DeviceInfo]:
    """Every OpenCL device of every platform, numbered as CLNET_DEVICE counts them."""
    found = []
    try:
        platforms = cl.get_platforms()
    except cl.Error:  # no ICD loader entry at all
        platforms = []
    for platform in platforms:
        try:
            platform_devices = platform.get_devices()
        except cl.Error:
            continue
        for d in platform_devices:
            found.append(DeviceInfo(
                index=len(found), name=d.name.strip(), vendor=d.vendor.strip(),
                platform=platform.name.strip(), platform_version=platform.version,
                driver=d.driver_version, type=_type_name(d.type),
                compute_units=d.max_compute_units, global_mem=d.global_mem_size,
                local_mem=d.local_mem_size, max_work_group=d.max_work_group_size,
                fp64=bool(d.double_fp_config) or "cl_khr_fp64" in d.extensions, cl_device=d))
    return found


def _pocl_version(info: DeviceInfo) -> tuple[int, ...]:
    match = re.search(r"PoCL (\d+)\.(\d+)", info.platform_version)
    return tuple(int(g) for g in match.groups()) if match else (0, 0)


def choose(spec: str | int | None = None) -> DeviceInfo:
    """Pick a device by index or case-insensitive name substring; None means CLNET_DEVICE or the default."""
    available = devices()
    if not available:
        raise DeviceError(
            "no OpenCL device found: install the embedded CPU device with "
            "'pip install pocl-binary-distribution' (or a vendor's OpenCL driver)")
    if spec is None:
        spec = os.environ.get("CLNET_DEVICE") or None
    if spec is None:
        gpus = [d for d in available if d.is_gpu]
        if gpus:
            return gpus[0]
        return max(available, key=lambda d: (_pocl_version(d), -d.index))
    text = str(spec).strip()
    if text.isdigit():
        index = int(text)
        if index >= len(available):
            raise DeviceError(f"device index {index} does not exist; there are {len(available)} "
                              f"devices (0..{len(available) - 1}): {_listing(available)}")
        return available[index]
    matches = [d for d in available
               if text.lower() in d.name.lower() or text.lower() in d.platform_version.lower()]
    if not matches:
        raise DeviceError(f"no device name or platform contains {text!r}; devices: {_listing(available)}")
    return matches[0]


def _listing(available: list[DeviceInfo]) -> str:
    return "; ".join(f"{d.index}: {d.describe()}" for d in available)


def print_table(file=sys.stdout) -> None:
    from .runtime import current_device_index
    chosen = current_device_index()
    header = f"{'#':>2}  {'type':<5} {'name':<34} {'platform':<30} {'CUs':>4} {'global':>9} {'local':>7} {'fp64':>4}"
    print(header, file=file)
    for d in devices():
        mark = "*" if d.index == chosen else " "
        print(f"{d.index:>2}{mark} {d.type:<5} {d.name[:34]:<34} {d.platform_version.strip()[:30]:<30} "
              f"{d.compute_units:>4} {d.global_mem / 2**30:>7.1f}Gi {d.local_mem // 1024:>5}Ki "
              f"{'yes' if d.fp64 else 'no':>4}", file=file)
    print("* = the device clnet uses now (set CLNET_DEVICE=<index|name> to choose)", file=file)
