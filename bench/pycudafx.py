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
                ("user_data", C.c_void_p), ("report", C.POINTER(Report))]


class MedianParams(C.Structure):
    _fields_ = [("radius", C.c_int), ("percentile", C.c_double), ("shape", C.c_int)]


class NlmeansParams(C.Structure):
    _fields_ = [("automatic", C.c_int), ("h", C.c_double), ("patch_radius", C.c_int),
                ("search_radius", C.c_int), ("sigma", C.c_double)]


class NlmeansInfo(C.Structure):
    _fields_ = [("sigma", C.c_double), ("h", C.c_double), ("patch_radius", C.c_int),
                ("search_radius", C.c_int), ("patch_sigma", C.c_double), ("centre_max", C.c_int)]


class QuantizeParams(C.Structure):
    _fields_ = [("colors", C.c_int), ("color_space", C.c_int), ("dither", C.c_int),
                ("max_iterations", C.c_int), ("seed", C.c_uint32)]


class Palette(C.Structure):
    _fields_ = [("colors", C.c_int), ("channels", C.c_int),
                ("entries", (C.c_double * 3) * 256), ("iterations", C.c_int)]


class ConvolveParams(C.Structure):
    _fields_ = [("preset", C.c_int), ("kernel", C.POINTER(C.c_double)), ("kernel_size", C.c_int),
                ("sigma", C.c_double), ("divisor", C.c_double), ("offset", C.c_double),
                ("border", C.c_int)]


class CudafxError(RuntimeError):
    pass


class Engine:
    """Loads the engine; each filter method takes an HxW or HxWxC uint8/float32
    array and returns (output array, extra) where extra holds what the call
    reported (backend, and nl-means info or the palette)."""

    def __init__(self, path=None):
        self.lib = C.CDLL(path or os.path.join(ROOT, "build", "libcudafx.so"))
        self.lib.cudafx_error_message.restype = C.c_char_p
        self.lib.cudafx_status_string.restype = C.c_char_p

    def _image(self, a, has_alpha):
        a = np.ascontiguousarray(a)
        h, w = a.shape[:2]
        c = 1 if a.ndim == 2 else a.shape[2]
        t = U8 if a.dtype == np.uint8 else F32
        if t == F32 and a.dtype != np.float32:
            raise TypeError("uint8 or float32 arrays only")
        img = Image(a.ctypes.data, w, h, c, int(has_alpha), t, a.strides[0])
        return a, img

    def _run(self, fn, src, params, extra, backend, threads, has_alpha):
        src, s = self._image(src, has_alpha)
        dst = np.empty_like(src)
        _, d = self._image(dst, has_alpha)
        report = Report()
        opts = Options(BACKENDS[backend], threads, None, None, C.pointer(report))
        args = [C.byref(s), C.byref(d), C.byref(params), C.byref(opts)]
        if extra is not None:
            args.append(C.byref(extra))
        status = fn(*args)
        if status:
            raise CudafxError(self.lib.cudafx_error_message().decode())
        return dst, report

    def median(self, src, radius=3, percentile=50.0, shape=0, backend="cpu", threads=0, has_alpha=False):
        p = MedianParams(radius, percentile, shape)
        return self._run(self.lib.cudafx_median, src, p, None, backend, threads, has_alpha)

    def nlmeans(self, src, automatic=True, h=10.0, patch_radius=1, search_radius=10,
                backend="cpu", threads=0, has_alpha=False):
        p = NlmeansParams(int(automatic), h, patch_radius, search_radius)
        info = NlmeansInfo()
        out, report = self._run(self.lib.cudafx_nlmeans, src, p, info, backend, threads, has_alpha)
        return out, report, info

    def quantize(self, src, colors=16, color_space=0, dither=0, max_iterations=30, seed=0,
                 backend="cpu", threads=0, has_alpha=False):
        p = QuantizeParams(colors, color_space, dither, max_iterations, seed)
        pal = Palette()
        out, report = self._run(self.lib.cudafx_quantize, src, p, pal, backend, threads, has_alpha)
        return out, report, pal

    def convolve(self, src, preset=7, kernel=None, sigma=2.0, divisor=0.0, offset=0.0, border=0,
                 backend="cpu", threads=0, has_alpha=False):
        taps, n = None, 0
        if kernel is not None:
            k = np.ascontiguousarray(kernel, dtype=np.float64)
            n = k.shape[0]
            taps = k.ctypes.data_as(C.POINTER(C.c_double))
        p = ConvolveParams(preset, taps, n, sigma, divisor, offset, border)
        return self._run(self.lib.cudafx_convolve, src, p, None, backend, threads, has_alpha)
