# SPDX-License-Identifier: GPL-3.0-or-later
"""ctypes binding of the cudafx engine (build/libcudafx.so) for benchmarks and
quality scripts: numpy arrays in, numpy arrays out, same process as the peers
(OpenCV, CuPy, PyTorch) they are compared with."""
import ctypes as C
import os

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

U8, F32 = 0, 1
BACKENDS = {"auto": 0, "cpu": 1, "cuda": 2}


class Image(C.Structure):
    _fields_ = [("data", C.c_void_p), ("width", C.c_int), ("height", C.c_int),
                ("channels", C.c_int), ("has_alpha", C.c_int), ("type", C.c_int),
                ("stride", C.c_size_t)]


class Report(C.Structure):
    _fields_ = [("backend_used", C.c_int), ("threads_used", C.c_int),
                ("device", C.c_char * 128), ("fallback", C.c_char * 256),
                ("kernel_ms", C.c_double), ("transfer_ms", C.c_double)]


class Options(C.Structure):
    _fields_ = [("backend", C.c_int), ("threads", C.c_int), ("progress", C.c_void_p),
                ("user_data", C.c_void_p), ("report", C.POINTER(Report)), ("device", C.c_int),
                ("lane", C.c_int), ("rows_ready", C.c_void_p), ("rows_user", C.c_void_p),
                ("rows_needed", C.c_void_p)]


class NoiseModel(C.Structure):
    _fields_ = [("signal_dependent", C.c_int), ("channels", C.c_int), ("a", C.c_double * 4),
                ("b", C.c_double * 4), ("sigma_dark", C.c_double), ("sigma_light", C.c_double),
                ("correlated", C.c_int), ("correlation", C.c_double),
                ("spatial_corr", (C.c_double * 3) * 3), ("channel_corr", C.c_double)]


class NlmeansInfo(C.Structure):
    _fields_ = [("sigma", C.c_double), ("h", C.c_double), ("patch_radius", C.c_int),
                ("search_radius", C.c_int), ("patch_sigma", C.c_double), ("centre_max", C.c_int),
                ("noise", NoiseModel), ("stabilised_sigma", C.c_double)]


class Palette(C.Structure):
    _fields_ = [("colors", C.c_int), ("channels", C.c_int),
                ("entries", (C.c_double * 3) * 256), ("iterations", C.c_int)]


class NlbayesInfo(C.Structure):
    _fields_ = [("sigma", C.c_double), ("noise", NoiseModel), ("stabilised_sigma", C.c_double),
                ("patch_size", C.c_int * 2), ("group_size", C.c_int * 2), ("search_size", C.c_int * 2),
                ("flat_area", C.c_int)]


class RunResult(C.Structure):
    _fields_ = [("report", Report), ("nlmeans", NlmeansInfo), ("palette", Palette),
                ("nlbayes", NlbayesInfo)]


# The argument table (core/cudafx.h): the binding fills values by walking it,
# as every host does, and hands them to the engine's one generic entry point.
class Choice(C.Structure):
    _fields_ = [("nick", C.c_char_p), ("label", C.c_char_p)]


class Arg(C.Structure):
    _fields_ = [("name", C.c_char_p), ("label", C.c_char_p), ("blurb", C.c_char_p),
                ("type", C.c_int), ("min", C.c_double), ("max", C.c_double), ("default", C.c_double),
                ("choices", C.POINTER(Choice)), ("n_choices", C.c_int),
                ("field", C.c_int), ("offset", C.c_size_t), ("chosen_by_auto", C.c_int)]


class FilterDesc(C.Structure):
    _fields_ = [("name", C.c_char_p), ("procedure", C.c_char_p), ("menu_label", C.c_char_p),
                ("menu_path", C.c_char_p), ("blurb", C.c_char_p), ("help", C.c_char_p),
                ("args", C.POINTER(Arg)), ("n_args", C.c_int),
                ("params_offset", C.c_size_t), ("params_size", C.c_size_t)]


ARG_DOUBLE_ARRAY = 4
ARG_PALETTE = 5
N_FILTERS = 5


class CudafxError(RuntimeError):
    pass


class Engine:
    """Loads the engine. run() takes an HxW or HxWxC uint8/float32 array and
    the filter's arguments by name; the per-filter methods return (output
    array, report) plus the nl-means info or the palette."""

    def __init__(self, path=None):
        self.lib = C.CDLL(path or os.path.join(ROOT, "build", "libcudafx.so"))
        self.lib.cudafx_error_message.restype = C.c_char_p
        self.lib.cudafx_status_string.restype = C.c_char_p
        self.lib.cudafx_filter_params_size.restype = C.c_size_t
        # The structs below mirror core/cudafx.h: a stale copy would have the
        # engine read past their end, so refuse it here.
        for struct, name in ((Image, "image"), (Options, "options"), (RunResult, "run_result")):
            size = getattr(self.lib, "cudafx_%s_size" % name)
            size.restype = C.c_size_t
            if size() != C.sizeof(struct):
                raise CudafxError("bench/pycudafx.py's %s is %d bytes, the library's cudafx_%s %d: "
                                  "update it from core/cudafx.h" % (struct.__name__, C.sizeof(struct),
                                                                    name, size()))
        table = (FilterDesc * N_FILTERS).in_dll(self.lib, "cudafx_filters")
        self.filters = {table[i].name.decode(): (i, table[i]) for i in range(N_FILTERS)}

    def _image(self, a, has_alpha):
        a = np.ascontiguousarray(a)
        h, w = a.shape[:2]
        c = 1 if a.ndim == 2 else a.shape[2]
        t = U8 if a.dtype == np.uint8 else F32
        if t == F32 and a.dtype != np.float32:
            raise TypeError("uint8 or float32 arrays only")
        img = Image(a.ctypes.data, w, h, c, int(has_alpha), t, a.strides[0])
        return a, img

    def run(self, filter_name, src, backend="cpu", threads=0, has_alpha=False, kernel=None,
            out=None, palette=None, **args):
        """Runs a filter by its CLI name with arguments named as in the table
        ("-" written "_"; choices by index or nick); the rest keep the
        table's defaults. palette: quantize's given palette, an Nx3 array
        (0..255). Returns (output array, RunResult)."""
        index, desc = self.filters[filter_name]
        values = (C.c_double * desc.n_args)()
        names = {}
        for i in range(desc.n_args):
            arg = desc.args[i]
            values[i] = arg.default
            names[arg.name.decode().replace("-", "_")] = (i, arg)
        args["backend"] = backend
        for key, value in args.items():
            if key not in names:
                raise TypeError("%s has no argument %s" % (filter_name, key))
            i, arg = names[key]
            if isinstance(value, str):
                nicks = [arg.choices[c].nick.decode() for c in range(arg.n_choices)]
                value = nicks.index(value)
            values[i] = float(value)
        taps, n = None, 0
        if kernel is not None:
            k = np.ascontiguousarray(kernel, dtype=np.float64)
            n = k.shape[0]
            taps = k.ctypes.data_as(C.POINTER(C.c_double))
        params = C.create_string_buffer(self.lib.cudafx_filter_params_size())
        self.lib.cudafx_filter_params_from_values(index, values, taps, n, params)
        given = None
        if palette is not None:
            entries = np.asarray(palette, dtype=np.float64).reshape(-1, 3)
            given = Palette()
            given.colors, given.channels = len(entries), 3
            for i, e in enumerate(entries):
                given.entries[i][:] = list(e)
            # the pointer goes where the table binds the palette argument
            arg = next(desc.args[i] for i in range(desc.n_args) if desc.args[i].type == ARG_PALETTE)
            C.c_void_p.from_buffer(params, arg.offset).value = C.addressof(given)
        src, s = self._image(src, has_alpha)
        dst = np.empty_like(src) if out is None else out
        _, d = self._image(dst, has_alpha)
        result = RunResult()
        opts = Options(BACKENDS["auto"], threads, None, None, None)
        status = self.lib.cudafx_run_filter(index, params, C.byref(s), C.byref(d), C.byref(opts),
                                            C.byref(result))
        if status:
            raise CudafxError(self.lib.cudafx_error_message().decode())
        return dst, result

    def median(self, src, **kw):
        out, result = self.run("median", src, **kw)
        return out, result.report

    def nlmeans(self, src, automatic=True, **kw):
        out, result = self.run("nl-means", src, auto=int(automatic), **kw)
        return out, result.report, result.nlmeans

    def nlbayes(self, src, automatic=True, **kw):
        out, result = self.run("nl-bayes", src, auto=int(automatic), **kw)
        return out, result.report, result.nlbayes

    def quantize(self, src, **kw):
        out, result = self.run("quantize", src, **kw)
        return out, result.report, result.palette

    def convolve(self, src, **kw):
        out, result = self.run("convolve", src, **kw)
        return out, result.report

    def default(self, filter_name, arg_name):
        """The table's default of an argument."""
        _, desc = self.filters[filter_name]
        for i in range(desc.n_args):
            if desc.args[i].name.decode() == arg_name:
                return desc.args[i].default
        raise KeyError(arg_name)
