#include "runtime/kernel_source.hpp"

#include <fmt/format.h>

namespace moejit {

KernelSource render_instance(const KernelInstance &k, const char *args_type, std::size_t param_bytes) {
    KernelSource ks;
    ks.name = k.name;
    ks.template_name = k.template_name;
    ks.entry = fmt::format("{}<{}>", k.kernel, k.template_args);
    ks.param_bytes = param_bytes;
    ks.source = fmt::format(
        "// moejit {title}\n"
        "#include \"moejit_common.cuh\"\n"
        "#include \"{template_name}\"\n"
        "\n"
        "namespace {{\n"
        "{constants}"
        "}}  // namespace\n"
        "\n"
        "template __global__ void {entry}(const __grid_constant__ {args_type});\n",
        fmt::arg("title", k.title), fmt::arg("template_name", k.template_name), fmt::arg("constants", k.constants),
        fmt::arg("entry", ks.entry), fmt::arg("args_type", args_type));
    return ks;
}

}  // namespace moejit
