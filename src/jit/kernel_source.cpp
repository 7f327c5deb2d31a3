#include "jit/kernel_source.hpp"

#include <fmt/format.h>

namespace moejit {

KernelSource wrap_kernel(const KernelWrapper &w) {
    KernelSource ks;
    ks.name = w.name;
    ks.template_name = w.template_name;
    ks.entry = "moejit_" + w.name;
    ks.source = fmt::format(
        "// moejit {title}\n"
        "#include \"moejit_common.cuh\"\n"
        "#include \"{template_name}\"\n"
        "\n"
        "namespace {{\n"
        "{constants}"
        "}}  // namespace\n"
        "\n"
        "extern \"C\" __global__ void __launch_bounds__({threads}) {entry}({params}) {{\n"
        "    {call};\n"
        "}}\n",
        fmt::arg("title", w.title), fmt::arg("template_name", w.template_name), fmt::arg("constants", w.constants),
        fmt::arg("threads", w.threads), fmt::arg("entry", ks.entry), fmt::arg("params", w.params),
        fmt::arg("call", w.call));
    return ks;
}

}  // namespace moejit
