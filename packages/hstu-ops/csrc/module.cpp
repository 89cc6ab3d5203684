// The `hstu_ops._C` Python extension module.
//
// Importing it runs the static TORCH_LIBRARY registrations of the other translation units
// (torch.ops.hstu_ops.*). The module itself only reports how it was built, so it uses the
// plain Python C API and needs no binding library.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <torch/version.h>

#define HSTU_STR_(x) #x
#define HSTU_STR(x) HSTU_STR_(x)

namespace {

#if defined(HSTU_OPS_WITH_CUDA)
constexpr bool kWithCuda = true;
#else
constexpr bool kWithCuda = false;
#endif
#if defined(HSTU_OPS_WITH_HIP)
constexpr bool kWithHip = true;
#else
constexpr bool kWithHip = false;
#endif
#if defined(_OPENMP)
constexpr bool kWithOpenMP = true;
#else
constexpr bool kWithOpenMP = false;
#endif

// The torch the extension was compiled against; another runtime torch may fail to load it.
constexpr const char* kTorchVersion =
    HSTU_STR(TORCH_VERSION_MAJOR) "." HSTU_STR(TORCH_VERSION_MINOR) "." HSTU_STR(
        TORCH_VERSION_PATCH);

int add_bool(PyObject* m, const char* name, bool value) {
  return PyModule_AddObjectRef(m, name, value ? Py_True : Py_False);
}

int exec_module(PyObject* m) {
  if (add_bool(m, "with_cpu", true) < 0 || add_bool(m, "with_cuda", kWithCuda) < 0 ||
      add_bool(m, "with_hip", kWithHip) < 0 || add_bool(m, "with_openmp", kWithOpenMP) < 0 ||
      PyModule_AddStringConstant(m, "torch_version", kTorchVersion) < 0) {
    return -1;
  }
  return 0;
}

PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, reinterpret_cast<void*>(exec_module)},
    {0, nullptr},
};

PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "_C",
    "hstu_ops native kernels (the operators live under torch.ops.hstu_ops)",
    0,
    nullptr,
    module_slots,
    nullptr,
    nullptr,
    nullptr,
};

}  // namespace

PyMODINIT_FUNC PyInit__C() { return PyModuleDef_Init(&module_def); }
