"""GPUs by name: compute capability and memory, and the GPUs this machine has (NVML, no torch import).

Compute capabilities are NVIDIA's own tables: developer.nvidia.com/cuda-gpus (compute capability 7.5 and up) and
developer.nvidia.com/cuda-legacy-gpus (7.2 and below, back to Kepler's 3.0), with the export and cloud variants
those pages leave out (A800, H800, H20, L20, RTX 4090 D, A10G) given the capability of the chip they share, as
NVIDIA's datasheets for them state. bf16 needs 8.0 (Ampere): DeepSpeed refuses it below with "Type bf16 is not
supported on your device" (deepspeed/runtime/engine.py, from ``accelerator.is_bf16_supported()``) and transformers
with "Your setup doesn't support bf16/gpu".

Memory is what NVML reports as the card's total (``nvmlDeviceGetMemoryInfo().total``, what ``nvidia-smi`` prints
as ``.../ 24564MiB``), the one figure every report uses: a card's name in a report is followed by that figure in
GiB (2^30 bytes), never by its marketing size. Where no NVML reading of a card is on record here, the datasheet size
is used and marked as nominal.

:func:`gpu_from_name` is the one entry point for a name given on the command line; it accepts what ``nvidia-smi``
prints (``NVIDIA A100-SXM4-80GB``, ``Tesla V100-SXM2-32GB``, ``NVIDIA GeForce RTX 4090``, ``NVIDIA TITAN X
(Pascal)``), and a compute capability for a card the table lacks.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
from dataclasses import dataclass

from dsdoctor.report import DsdoctorError

GIB = 2 ** 30
MIB = 2 ** 20

CUDA_GPUS = "developer.nvidia.com/cuda-gpus"
CUDA_LEGACY = "developer.nvidia.com/cuda-legacy-gpus"


@dataclass(frozen=True)
class Gpu:
    """One GPU model.

    ``memory_bytes``: the NVML total of this card (0 when unknown: a name that does not say which memory variant
    it is, or a card known only by its compute capability); ``memory_source`` says where the figure comes from and
    ``memory_variants`` lists the sizes (GB, as NVIDIA names them) when the name left the variant open.
    ``source``: "table" (from a name), "nvml" (seen on this machine) or "--gpu-cc" (a capability given by the user).
    """

    name: str
    capability: tuple[int, int]
    memory_bytes: int = 0
    source: str = "table"
    memory_source: str = ""
    capability_source: str = ""
    memory_variants: tuple[int, ...] = ()

    @property
    def bf16(self) -> bool:
        return self.capability >= (8, 0)

    @property
    def label(self) -> str:
        """The name with its memory as NVML reports it, in GiB: ``H200 (140.40 GiB)``."""
        return f"{self.name} ({self.memory_bytes / GIB:.2f} GiB)" if self.memory_bytes else self.name


#: Compute capability -> the names NVIDIA's pages list under it, and the page. Names are as NVIDIA writes them;
#: what nvidia-smi adds (the "NVIDIA "/"Tesla "/"GeForce " prefixes, "-SXM4-80GB", "PCIe", "Laptop GPU") is
#: normalised away by :func:`normalise`.
CAPABILITIES: tuple[tuple[tuple[int, int], str, tuple[str, ...]], ...] = (
    ((12, 1), CUDA_GPUS, ("GB10",)),
    ((12, 0), CUDA_GPUS, ("RTX PRO 6000 Blackwell", "RTX PRO 6000 Blackwell Server Edition",
                          "RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000 Blackwell Max-Q Workstation Edition",
                          "RTX PRO 5000 Blackwell", "RTX PRO 4500 Blackwell", "RTX PRO 4500 Blackwell Server Edition",
                          "RTX PRO 4000 Blackwell", "RTX PRO 4000 Blackwell SFF Edition", "RTX PRO 2000 Blackwell",
                          "GeForce RTX 5090", "GeForce RTX 5080", "GeForce RTX 5070 Ti", "GeForce RTX 5070",
                          "GeForce RTX 5060 Ti", "GeForce RTX 5060", "GeForce RTX 5050")),
    ((11, 0), CUDA_GPUS, ("Jetson T5000", "Jetson T4000")),
    ((10, 3), CUDA_GPUS, ("GB300", "B300")),
    ((10, 0), CUDA_GPUS, ("GB200", "B200")),
    ((9, 0), CUDA_GPUS, ("GH200", "H200", "H200 NVL", "H100", "H100 NVL")),
    ((8, 9), CUDA_GPUS, ("L4", "L40", "L40S", "RTX 6000 Ada", "RTX 5000 Ada", "RTX 4500 Ada", "RTX 4000 Ada",
                         "RTX 4000 SFF Ada", "RTX 2000 Ada", "GeForce RTX 4090", "GeForce RTX 4080",
                         "GeForce RTX 4080 Super", "GeForce RTX 4070 Ti", "GeForce RTX 4070 Ti Super",
                         "GeForce RTX 4070", "GeForce RTX 4070 Super", "GeForce RTX 4060 Ti", "GeForce RTX 4060",
                         "GeForce RTX 4050")),
    ((8, 7), CUDA_GPUS, ("Jetson AGX Orin", "Jetson Orin NX", "Jetson Orin Nano")),
    ((8, 6), CUDA_GPUS, ("A40", "A10", "A16", "A2", "RTX A6000", "RTX A5000", "RTX A4500", "RTX A4000", "RTX A3000",
                         "RTX A2000", "GeForce RTX 3090 Ti", "GeForce RTX 3090", "GeForce RTX 3080 Ti",
                         "GeForce RTX 3080", "GeForce RTX 3070 Ti", "GeForce RTX 3070", "GeForce RTX 3060 Ti",
                         "GeForce RTX 3060", "GeForce RTX 3050 Ti", "GeForce RTX 3050")),
    ((8, 0), CUDA_GPUS, ("A100", "A30")),
    ((7, 5), CUDA_GPUS, ("T4", "Quadro RTX 8000", "Quadro RTX 6000", "Quadro RTX 5000", "Quadro RTX 4000",
                         "Quadro RTX 3000", "Quadro T2000", "T1200", "T1000", "T600", "T500", "T400",
                         "GeForce GTX 1650 Ti", "TITAN RTX", "GeForce RTX 2080 Ti", "GeForce RTX 2080",
                         "GeForce RTX 2070", "GeForce RTX 2060")),
    ((7, 2), CUDA_LEGACY, ("Jetson AGX Xavier", "Jetson Xavier NX")),
    ((7, 0), CUDA_LEGACY, ("V100", "Quadro GV100", "TITAN V")),
    ((6, 2), CUDA_LEGACY, ("Jetson TX2",)),
    ((6, 1), CUDA_LEGACY, ("Tesla P40", "Tesla P4", "Quadro P6000", "Quadro P5200", "Quadro P5000", "Quadro P4200",
                           "Quadro P4000", "Quadro P3200", "Quadro P3000", "Quadro P2200", "Quadro P2000",
                           "Quadro P1000", "Quadro P620", "Quadro P600", "Quadro P500", "Quadro P400", "P520",
                           "TITAN Xp", "TITAN X (Pascal)", "GeForce GTX 1080 Ti", "GeForce GTX 1080",
                           "GeForce GTX 1070 Ti", "GeForce GTX 1070", "GeForce GTX 1060", "GeForce GTX 1050 Ti",
                           "GeForce GTX 1050")),
    ((6, 0), CUDA_LEGACY, ("Tesla P100", "Quadro GP100")),
    ((5, 3), CUDA_LEGACY, ("Jetson Nano", "Jetson TX1", "Tegra X1")),
    ((5, 2), CUDA_LEGACY, ("Tesla M60", "Tesla M40", "Quadro M6000", "Quadro M5000", "Quadro M4000", "Quadro M2000",
                           "Quadro M5500M", "Quadro M2200", "Quadro M620", "GeForce GTX TITAN X",
                           "GeForce GTX 980 Ti", "GeForce GTX 980", "GeForce GTX 970", "GeForce GTX 960",
                           "GeForce GTX 950", "GeForce GTX 980M", "GeForce GTX 970M", "GeForce GTX 965M",
                           "GeForce 910M")),
    ((5, 0), CUDA_LEGACY, ("Quadro K2200", "Quadro K1200", "Quadro K620", "Quadro M1200", "Quadro M520",
                           "Quadro M5000M", "Quadro M4000M", "Quadro M3000M", "Quadro M2000M", "Quadro M1000M",
                           "Quadro K620M", "Quadro M600M", "Quadro M500M", "NVS 810", "GeForce GTX 750 Ti",
                           "GeForce GTX 750", "GeForce GTX 960M", "GeForce GTX 950M", "GeForce 940M",
                           "GeForce 930M", "GeForce GTX 850M", "GeForce 840M", "GeForce 830M")),
    ((3, 7), CUDA_LEGACY, ("Tesla K80",)),
    ((3, 5), CUDA_LEGACY, ("Tesla K40", "Tesla K20", "Quadro K6000", "Quadro K5200", "Quadro K610M", "Quadro K510M",
                           "GeForce GTX TITAN Z", "GeForce GTX TITAN Black", "GeForce GTX TITAN",
                           "GeForce GTX 780 Ti", "GeForce GTX 780", "GeForce GT 920M")),
    ((3, 2), CUDA_LEGACY, ("Tegra K1", "Jetson TK1")),
    ((3, 0), CUDA_LEGACY, ("Tesla K10", "Quadro K5000", "Quadro K4200", "Quadro K4000", "Quadro K2000",
                           "Quadro K2000D", "Quadro K600", "Quadro K420", "Quadro 410", "Quadro K5000M",
                           "Quadro K4100M", "Quadro K3100M", "Quadro K2100M", "Quadro K1100M", "Quadro K500M",
                           "NVS 510", "GRID K520", "GeForce GTX 770", "GeForce GTX 760", "GeForce GTX 690",
                           "GeForce GTX 680", "GeForce GTX 670", "GeForce GTX 660 Ti", "GeForce GTX 660",
                           "GeForce GTX 650 Ti BOOST", "GeForce GTX 650 Ti", "GeForce GTX 650", "GeForce GTX 880M",
                           "GeForce GTX 870M", "GeForce GTX 780M", "GeForce GTX 770M", "GeForce GTX 765M",
                           "GeForce GTX 760M", "GeForce GTX 680MX", "GeForce GTX 680M", "GeForce GTX 675MX",
                           "GeForce GTX 670MX", "GeForce GTX 660M", "GeForce GT 750M", "GeForce GT 650M",
                           "GeForce GT 745M", "GeForce GT 645M", "GeForce GT 740M", "GeForce GT 730M",
                           "GeForce GT 640M", "GeForce GT 640M LE", "GeForce GT 740")),
)

#: Cards the two pages leave out, with the capability of the chip each shares and where that is stated.
VARIANTS: tuple[tuple[str, tuple[int, int], str], ...] = (
    ("A800", (8, 0), "NVIDIA A800 datasheet: the A100's GA100 chip (export variant)"),
    ("H800", (9, 0), "NVIDIA H800 datasheet: the H100's GH100 chip (export variant)"),
    ("H20", (9, 0), "NVIDIA H20 datasheet: Hopper GH100 (export variant)"),
    ("L20", (8, 9), "NVIDIA L20 datasheet: Ada Lovelace AD102 (export variant)"),
    ("GeForce RTX 4090 D", (8, 9), "NVIDIA GeForce RTX 4090 D: the RTX 4090's AD102 chip (export variant)"),
    ("A10G", (8, 6), "AWS EC2 G5 documentation: NVIDIA A10G, Ampere GA102 as the A10"),
    ("V100S", (7, 0), "NVIDIA V100S datasheet: Volta GV100 as the V100"),
    ("GeForce RTX 2080 Super", (7, 5), "Turing TU104 as the RTX 2080 (" + CUDA_GPUS + " lists the Turing family at 7.5)"),
    ("GeForce RTX 2070 Super", (7, 5), "Turing TU104 (" + CUDA_GPUS + ": Turing is 7.5)"),
    ("GeForce RTX 2060 Super", (7, 5), "Turing TU106 (" + CUDA_GPUS + ": Turing is 7.5)"),
    ("GeForce GTX 1660 Ti", (7, 5), "Turing TU116 (" + CUDA_GPUS + ": Turing is 7.5)"),
    ("GeForce GTX 1660 Super", (7, 5), "Turing TU116 (" + CUDA_GPUS + ": Turing is 7.5)"),
    ("GeForce GTX 1660", (7, 5), "Turing TU116 (" + CUDA_GPUS + ": Turing is 7.5)"),
    ("GeForce GTX 1650 Super", (7, 5), "Turing TU116 (" + CUDA_GPUS + ": Turing is 7.5)"),
    ("GeForce GTX 1650", (7, 5), "Turing TU117 (" + CUDA_GPUS + ": Turing is 7.5)"),
    ("Tesla K20X", (3, 5), "Kepler GK110 as the K20 (" + CUDA_LEGACY + ")"),
)

#: Other spellings of a name in the tables: what nvidia-smi or users write -> the table's name.
ALIASES = {"TITAN X Pascal": "TITAN X (Pascal)", "Tesla K40m": "Tesla K40", "Tesla K40c": "Tesla K40",
           "Tesla K40t": "Tesla K40", "Tesla K40s": "Tesla K40", "Tesla K20m": "Tesla K20", "Tesla K20c": "Tesla K20",
           "Tesla K20Xm": "Tesla K20X", "GeForce GTX TITAN X (Maxwell)": "GeForce GTX TITAN X",
           "TITAN X (Maxwell)": "GeForce GTX TITAN X", "Quadro M6000 24GB": "Quadro M6000",
           "RTX 6000 Ada Generation": "RTX 6000 Ada", "RTX 5000 Ada Generation": "RTX 5000 Ada",
           "RTX 4500 Ada Generation": "RTX 4500 Ada", "RTX 4000 Ada Generation": "RTX 4000 Ada",
           "RTX 4000 SFF Ada Generation": "RTX 4000 SFF Ada", "RTX 2000 Ada Generation": "RTX 2000 Ada",
           "GeForce RTX 4090D": "GeForce RTX 4090 D", "DGX Spark": "GB10", "GH200 480GB": "GH200"}

#: NVML's total for a card (MiB, as nvidia-smi prints it), where a reading is on record, keyed by (table name,
#: memory variant in GB or None for a card sold in one size), with the report the reading comes from.
NVML_MIB: dict[tuple[str, int | None], tuple[int, str]] = {
    ("GeForce RTX 4090", None): (24564, "nvidia-smi in RLinf/RLinf issue 255"),
    ("GeForce RTX 3090", None): (24576, "nvidia-smi in noonghunna/club-3090 issue 1128"),
    ("GeForce RTX 5090", None): (32607, "nvidia-smi in noonghunna/club-3090 issue 1261"),
    ("A100", 40): (40960, "nvidia-smi totals in modal-labs/modal-client PR 2797"),
    ("A100", 80): (81920, "nvidia-smi totals in modal-labs/modal-client PR 2797"),
    ("A800", 80): (81920, "nvidia-smi in dexmal/dexbotic issue 41 (A800-SXM4-80GB)"),
    ("H100", 80): (81559, "nvidia-smi totals in modal-labs/modal-client PR 2797"),
    ("H200", None): (143771, "nvidia-smi on this project's H200 (shared/gpu/README.md)"),
    ("A10", None): (23028, "nvidia-smi totals in modal-labs/modal-client PR 2797"),
    ("L40S", None): (46068, "nvidia-smi totals in modal-labs/modal-client PR 2797"),
    ("L4", None): (23034, "nvidia-smi totals in modal-labs/modal-client PR 2797"),
    ("T4", None): (15360, "nvidia-smi totals in modal-labs/modal-client PR 2797"),
    ("V100", 16): (16160, "nvidia-smi in 4paradigm/k8s-vgpu-scheduler issue 7 (V100-SXM2-16GB)"),
    ("Tesla P100", 16): (16384, "nvidia-smi in wookayin/gpustat issue 130 (P100-PCIE-16GB)"),
    ("H20", None): (97871, "nvidia-smi in NVIDIA/nvtrust issue 128"),
    ("A10G", None): (23028, "nvidia-smi in NVIDIA/DCGM issue 232 (AWS, ECC on)"),
    ("H800", None): (81559, "nvidia-smi pasted in nine public GitHub files (SXM and PCIe)"),
    ("A800", 40): (40960, "nvidia-smi --query-gpu in a public run-environment report"),
    ("B200", None): (183359, "nvidia-smi in NVIDIA/TensorRT-LLM issue 10278"),
    ("H100 NVL", None): (95830, "nvidia-smi in NVIDIA/gpu-admin-tools issue 4"),
    ("GH200", 96): (97871, "nvidia-smi (GH200 480GB) pasted in eight public GitHub files"),
    ("GH200", 144): (146831, "nvidia-smi --query-gpu (GH200 144G HBM3e) in a public GitHub file"),
    ("B300", None): (275040, "nvidia-smi (B300 SXM6 AC) pasted in seven public GitHub files"),
    ("GB200", None): (189471, "nvidia-smi pasted in seven public GitHub files"),
    ("A30", None): (24576, "nvidia-smi pasted in eight public GitHub files"),
    # the 48 GB GDDR6 data-centre cards ship with ECC on: 46068 MiB; 49140 MiB with ECC off (public nvidia-smi pastes)
    ("A40", None): (46068, "nvidia-smi pasted in six public GitHub files (ECC on; 49140 MiB with it off)"),
    ("L40", None): (46068, "nvidia-smi pasted in six public GitHub files (ECC on; 49140 MiB with it off)"),
    ("L20", None): (46068, "nvidia-smi pasted in seven public GitHub files (ECC on; 49140 MiB with it off)"),
    ("A16", None): (15356, "nvidia-smi (per GPU of the board) in a public GitHub file (ECC on)"),
    ("V100", 32): (32510, "nvidia-smi (V100-SXM2 and V100-PCIE 32GB) in public GitHub files"),
    ("V100S", None): (32510, "nvidia-smi (V100S-PCIE) in a public GitHub file"),
    ("Tesla P40", None): (23040, "nvidia-smi in two public GitHub files (ECC on; 24451 MiB with it off)"),
    # workstation and GeForce cards ship with ECC off (an RTX A6000 with ECC on shows 46068 MiB)
    ("RTX PRO 6000 Blackwell", None): (97887, "nvidia-smi --query-gpu in a public GitHub file"),
    ("RTX 6000 Ada", None): (49140, "nvidia-smi pasted in ten public GitHub files (ECC off)"),
    ("RTX A6000", None): (49140, "nvidia-smi pasted in eight public GitHub files (ECC off; 46068 MiB with it on)"),
    ("RTX A5000", None): (24564, "nvidia-smi pasted in six public GitHub files (ECC off)"),
    ("RTX A4000", None): (16376, "nvidia-smi pasted in ten public GitHub files (ECC off)"),
    ("Quadro RTX 8000", None): (49152, "nvidia-smi pasted in three public GitHub files (ECC off)"),
    ("GeForce RTX 3090 Ti", None): (24564, "nvidia-smi pasted in nine public GitHub files"),
    ("GeForce RTX 4080", None): (16376, "nvidia-smi pasted in four public GitHub files"),
    ("GeForce RTX 2080 Ti", None): (11264, "nvidia-smi pasted in seven public GitHub files (recent drivers)"),
    ("GeForce GTX 1080 Ti", None): (11264, "nvidia-smi pasted in five public GitHub files (recent drivers)"),
}


@functools.lru_cache(maxsize=1)
def nominal_ratio() -> float:
    """The least share of a card's nominal memory (GB as NVIDIA names it, taken as GiB) that NVML reports, over the
    readings in :data:`NVML_MIB`: 0.933 today (the B300's 275040 MiB of its 288 GB; the GDDR6 cards with ECC on keep
    1/16 for it: 0.9375 of A10, L4, T4, A40...). A card with no reading on record is counted at this share of its
    nominal size, so that a verdict of "fits" never rests on memory the card may not have."""
    return min(mib / (((size or MEMORY_GB[name][0]) * 1024)) for (name, size), (mib, _) in NVML_MIB.items())

#: Memory variants (GB, as NVIDIA names them) of the cards whose datasheets give them; the first is the one assumed
#: only when a card comes in a single size. A card with several sizes needs the variant in its name (``A100 80GB``)
#: or ``--gpu-mem``.
MEMORY_GB: dict[str, tuple[int, ...]] = {
    "B300": (288,), "B200": (180,), "GB200": (186,), "H200": (141,), "H200 NVL": (141,), "GH200": (96, 144),
    "H100": (80,), "H100 NVL": (94,), "H800": (80,), "H20": (96,), "A100": (40, 80), "A800": (40, 80), "A30": (24,),
    "A40": (48,), "A10": (24,), "A10G": (24,), "A16": (16,), "A2": (16,), "L40S": (48,), "L40": (48,), "L20": (48,),
    "L4": (24,), "T4": (16,), "V100": (16, 32), "V100S": (32,), "Tesla P100": (12, 16), "Tesla P40": (24,),
    "Tesla P4": (8,), "Tesla M40": (12, 24), "Tesla K80": (12,), "Tesla K40": (12,),
    "RTX PRO 6000 Blackwell": (96,), "RTX 6000 Ada": (48,), "RTX A6000": (48,), "RTX A5000": (24,),
    "RTX A4000": (16,), "Quadro RTX 8000": (48,), "Quadro RTX 6000": (24,), "Quadro GV100": (32,),
    "TITAN RTX": (24,), "TITAN V": (12,), "TITAN Xp": (12,), "TITAN X (Pascal)": (12,),
    "GeForce RTX 5090": (32,), "GeForce RTX 5080": (16,), "GeForce RTX 4090": (24,), "GeForce RTX 4090 D": (24,),
    "GeForce RTX 4080": (16,), "GeForce RTX 3090 Ti": (24,), "GeForce RTX 3090": (24,), "GeForce RTX 3080 Ti": (12,),
    "GeForce RTX 3080": (10, 12), "GeForce RTX 2080 Ti": (11,), "GeForce GTX 1080 Ti": (11,),
}

#: Words nvidia-smi and vendors add around a name that say nothing about the chip: brands, form factors (SXM, PCIe,
#: NVL is kept: the H100 NVL is its own card), memory types, laptop markers.
_NOISE = frozenset({"nvidia", "geforce", "tesla", "quadro", "graphics", "gpu", "card", "laptop", "mobile",
                    "notebook", "max", "q", "design", "with", "generation", "edition", "pcie", "pci", "e", "sxm",
                    "sxm2", "sxm3", "sxm4", "sxm5", "sxm6", "hbm", "hbm2", "hbm2e", "hbm3", "hbm3e", "gddr6", "gddr6x",
                    "gddr7", "gddr5", "gddr5x", "tm", "r", "workstation", "server", "oem", "founders"})


def normalise(name: str) -> tuple[str, int | None]:
    """(lookup key, memory in GB or None) for a GPU name as nvidia-smi, a vendor or a user writes it.

    Lower case; ``(TM)``/``(R)`` and punctuation dropped (``-SXM4-80GB`` splits into words); brands (NVIDIA,
    GeForce, Tesla, Quadro), form factors (SXM*, PCIe), memory types and laptop markers dropped; a memory size
    (``80GB``, ``80 GB``) taken out as the variant; a suffix glued to a model number split off (``4090D`` ->
    ``4090 d``, ``1080Ti`` -> ``1080 ti``). ``RTX``/``GTX`` stay (the Quadro RTX 6000 is not the RTX 6000 Ada);
    :func:`gpu_from_name` retries without them.
    """
    text = name.lower().replace("(tm)", " ").replace("(r)", " ")
    text = re.sub(r"[^a-z0-9]+", " ", text)
    text = re.sub(r"\b(rtx|gtx|gt)(\d)", r"\1 \2", text)
    text = re.sub(r"(\d)(ti|super|d|gb)\b", r"\1 \2", text)
    words = text.split()
    memory = None
    kept: list[str] = []
    for i, word in enumerate(words):
        m = re.fullmatch(r"(\d{1,4})gb", word)
        if m:
            memory = int(m.group(1))
            continue
        if word == "gb":
            if kept and kept[-1].isdecimal() and len(kept[-1]) <= 3:
                memory = int(kept.pop())
            continue
        if word in _NOISE:
            continue
        kept.append(word)
    return " ".join(kept), memory


def _without_family(key: str) -> str:
    return " ".join(w for w in key.split() if w not in ("rtx", "gtx", "gt"))


@functools.lru_cache(maxsize=1)
def _index() -> tuple[dict[str, tuple[str, tuple[int, int], str]], dict[str, list[str]]]:
    """key -> (table name, capability, source), and family-less key -> table names (for "4090", "A6000")."""
    exact: dict[str, tuple[str, tuple[int, int], str]] = {}
    for capability, source, names in CAPABILITIES:
        for name in names:
            exact.setdefault(normalise(name)[0], (name, capability, source))
    for name, capability, source in VARIANTS:
        exact.setdefault(normalise(name)[0], (name, capability, source))
    for alias, target in ALIASES.items():
        exact[normalise(alias)[0]] = exact[normalise(target)[0]]
    loose: dict[str, list[str]] = {}
    for key, (name, _, _) in exact.items():
        bucket = loose.setdefault(_without_family(key), [])
        if name not in bucket:
            bucket.append(name)
    return exact, loose


def parse_capability(text: str | tuple | None, option: str = "--gpu-cc") -> tuple[int, int] | None:
    """``"6.1"`` -> (6, 1); None stays None.

    Raises:
        DsdoctorError: anything but MAJOR.MINOR with a major of 1 to 20 and a one-digit minor (``9.0a`` is an
            architecture flag of TORCH_CUDA_ARCH_LIST, not a capability).
    """
    if text is None:
        return None
    if isinstance(text, tuple):
        text = ".".join(str(x) for x in text)
    m = re.fullmatch(r"\s*(\d{1,2})\.(\d)\s*", str(text))
    if not m or not 1 <= int(m.group(1)) <= 20:
        raise DsdoctorError(f"{option} {str(text)[:40]!r}: give the compute capability as MAJOR.MINOR, e.g. 6.1 or "
                            f"8.0 (nvidia-smi --query-gpu=compute_cap --format=csv prints it)")
    return int(m.group(1)), int(m.group(2))


def _memory(table_name: str, variant: int | None) -> tuple[int, str, tuple[int, ...]]:
    """(bytes, where the figure comes from, the card's memory variants) for a table card and the memory size its
    name carried (``80`` from ``A100-SXM4-80GB``), or None. 0 bytes when the size is open or unknown."""
    sizes = MEMORY_GB.get(table_name, ())
    if variant is not None and sizes and variant not in sizes:
        return 0, (f"{variant} GB is not a memory size of the {table_name} "
                   f"({' or '.join(f'{s} GB' for s in sizes)})"), sizes
    size = variant if variant is not None else (sizes[0] if len(sizes) == 1 else None)
    if size is None:
        return 0, (f"the {table_name} comes with {' or '.join(f'{s} GB' for s in sizes)}" if sizes
                   else f"no memory size on record for the {table_name}"), sizes
    reading = NVML_MIB.get((table_name, size)) or (NVML_MIB.get((table_name, None)) if len(sizes) <= 1 else None)
    if reading:
        mib, where = reading
        return mib * MIB, f"NVML total {mib} MiB ({where})", sizes
    ratio = nominal_ratio()
    return int(size * GIB * ratio), (f"nominal {size} GB from NVIDIA's datasheet, counted as {ratio:.2%} of {size} "
                                     f"GiB, the least NVML reports of a card's nominal size among the readings on "
                                     f"record (no reading of this card; --gpu-mem sets it exactly)"), sizes


#: Names that stand for two cards of different capability; the user has to say which.
AMBIGUOUS = {"titan x": ("TITAN X (Pascal)", "GeForce GTX TITAN X")}


def gpu_from_name(name: str | None, capability: str | tuple | None = None) -> Gpu:
    """The :class:`Gpu` for a name as nvidia-smi prints it or as people write it (``V100``, ``Tesla V100-SXM2-32GB``,
    ``NVIDIA GeForce RTX 4090``, ``RTX 4090``, ``A100 80GB``, ``NVIDIA TITAN X (Pascal)``), with its compute
    capability (:data:`CAPABILITIES`) and its memory (:data:`NVML_MIB`, else :data:`MEMORY_GB` as nominal, else 0).

    ``capability`` (``"6.1"``, from ``--gpu-cc``) names a card the table lacks: then any name is accepted and
    the capability is the user's. With a name the table knows, it must agree with the table. With no name, it
    stands for "a GPU of compute capability X.Y".

    Raises:
        DsdoctorError: an empty or unknown name without ``capability`` (the closest known names are listed), a
            malformed capability, or a capability that contradicts the table.
    """
    cc = parse_capability(capability)
    if name is None or not str(name).strip():
        if cc is None:
            raise DsdoctorError("--gpu is empty: give the GPU's name as nvidia-smi prints it (e.g. "
                                "\"NVIDIA A100-SXM4-80GB\"), or --gpu-cc MAJOR.MINOR")
        return Gpu(name=f"a GPU of compute capability {cc[0]}.{cc[1]}", capability=cc, source="--gpu-cc",
                   capability_source="--gpu-cc")
    shown = " ".join(str(name).split())[:80]
    key, variant = normalise(shown)
    exact, loose = _index()
    if key in AMBIGUOUS and cc is None:
        raise DsdoctorError(f"--gpu {shown}: that name stands for {' and '.join(AMBIGUOUS[key])} (compute "
                            f"capabilities differ); name one as nvidia-smi prints it, or add --gpu-cc")
    hit = exact.get(key)
    if hit is None:
        names = loose.get(_without_family(key), [])
        if len(names) == 1:
            hit = exact[normalise(names[0])[0]]
        elif len(names) > 1 and cc is None:
            raise DsdoctorError(f"--gpu {shown}: several GPUs have that name ({', '.join(names)}); name one of them")
    if hit is None:
        if cc is not None:
            return Gpu(name=shown, capability=cc, source="--gpu-cc", capability_source="--gpu-cc",
                       memory_bytes=variant * GIB if variant else 0,
                       memory_source=f"nominal {variant} GB from the name" if variant else "")
        raise DsdoctorError(f"--gpu {shown}: unknown GPU{_close(key)}; for a card the table lacks, give its compute "
                            f"capability with --gpu-cc MAJOR.MINOR (nvidia-smi --query-gpu=compute_cap --format=csv)")
    table_name, table_cc, source = hit
    if cc is not None and cc != table_cc:
        raise DsdoctorError(f"--gpu-cc {cc[0]}.{cc[1]} contradicts the {table_name}'s compute capability "
                            f"{table_cc[0]}.{table_cc[1]} ({source}); drop --gpu-cc or check the name")
    memory, memory_source, variants = _memory(table_name, variant)
    shown_name = f"{table_name} {variant}GB" if memory and variant and len(variants) > 1 else table_name
    return Gpu(name=shown_name, capability=table_cc, memory_bytes=memory, source="table", memory_source=memory_source,
               capability_source=source, memory_variants=variants if not memory else ())


def _close(key: str) -> str:
    exact, _ = _index()
    names = sorted({name for name, _, _ in exact.values()})
    keyed = {normalise(n)[0]: n for n in names}
    close = difflib.get_close_matches(key, list(keyed), n=5, cutoff=0.6)
    if not close:
        close = difflib.get_close_matches(_without_family(key), [_without_family(k) for k in keyed], n=5, cutoff=0.6)
        close = [k for k in keyed if _without_family(k) in close][:5]
    return f" (close names: {', '.join(keyed[c] for c in close)})" if close else ""


def known_names() -> list[str]:
    """Every name of the capability tables (for tests and the docs)."""
    exact, _ = _index()
    return sorted({name for name, _, _ in exact.values()})


def visible_gpus() -> list[Gpu]:
    """The GPUs this process may use, from NVML (nvidia-ml-py), narrowed by ``CUDA_VISIBLE_DEVICES`` when it
    lists indices. Empty without a driver, without NVML, or with ``CUDA_VISIBLE_DEVICES=""``."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and not visible.strip():
        return []
    if not os.path.exists("/dev/nvidiactl") and not os.environ.get("DSDOCTOR_FORCE_NVML"):
        return []  # no NVIDIA driver loaded: skip loading NVML (30 ms of check's 0.3 s budget)
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return []
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else name
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            total = pynvml.nvmlDeviceGetMemoryInfo(handle).total
            gpus.append(Gpu(name=name, capability=(major, minor), memory_bytes=int(total), source="nvml",
                            memory_source="NVML total on this machine", capability_source="NVML"))
    except Exception:
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    if visible is not None:
        wanted = [v.strip() for v in visible.split(",")]
        if all(v.isdecimal() for v in wanted):
            gpus = [gpus[int(v)] for v in wanted if int(v) < len(gpus)]
    return gpus


def host_ram_bytes() -> int | None:
    """This host's RAM (``MemTotal`` of ``/proc/meminfo``), bytes; None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
