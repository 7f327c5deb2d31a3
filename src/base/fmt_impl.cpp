// fmt's compiled part, built once here instead of in every file that includes <fmt/format.h>.
// fmt is used without its library (no libfmt.so.N next to libmoejit; docs/DECISIONS.md), and
// FMT_HEADER_ONLY made every file compile and optimize this part again: ~30 s of a ~45 s -O3
// compile, in ~60 files. This is fmt 9's src/format.cc (meson.build uses it for fmt 9.x only
// and falls back to FMT_HEADER_ONLY for other versions, whose lists differ); a missing
// instantiation is a link error, not a silent one.
#include <fmt/format-inl.h>

#if FMT_VERSION < 90000 || FMT_VERSION >= 100000
#error "src/base/fmt_impl.cpp is fmt 9's src/format.cc; meson.build uses FMT_HEADER_ONLY for other versions"
#endif

FMT_BEGIN_NAMESPACE
namespace detail {

template FMT_API auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template FMT_API auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;

#ifndef FMT_STATIC_THOUSANDS_SEPARATOR
template FMT_API locale_ref::locale_ref(const std::locale &loc);
template FMT_API auto locale_ref::get<std::locale>() const -> std::locale;
#endif

// char
template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API void buffer<char>::append(const char *, const char *);
template FMT_API void vformat_to(buffer<char> &, string_view, basic_format_args<FMT_BUFFER_CONTEXT(char)>,
                                 locale_ref);

// wchar_t
template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<wchar_t>;
template FMT_API auto decimal_point_impl(locale_ref) -> wchar_t;
template FMT_API void buffer<wchar_t>::append(const wchar_t *, const wchar_t *);

}  // namespace detail
FMT_END_NAMESPACE
