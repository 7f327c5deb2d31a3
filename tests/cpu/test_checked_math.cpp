// Checked arithmetic (issue 16 item 4): the helper, and the plan's layout (what
// moejit_plan_saved_size / moejit_plan_workspace_size and forward / backward compute) for bad and
// overflowing T: INVALID_ARGUMENT naming the argument, never UB (the sanitizer build runs this
// under UBSan). On 0.3.0 PlanLayout computed T·k unchecked: these cases failed (no exception,
// signed-overflow reports under UBSan).
#define BOOST_TEST_MODULE checked_math
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <limits>
#include <string>

#include "base/checked_math.hpp"
#include "base/error.hpp"
#include "moe/layer_gemms.hpp"
#include "moe/plan_layout.hpp"
#include "print_enums.hpp"

using namespace moejit;

namespace {

// Runs f; it must throw moejit::Error with `status` and a message containing `needle`.
template <class F> void expect_error(F &&f, Status status, const std::string &needle) {
    try {
        f();
        BOOST_ERROR("no error; expected one naming " << needle);
    } catch (const Error &e) {
        BOOST_TEST(e.status() == status);
        BOOST_TEST(std::string(e.what()).find(needle) != std::string::npos, "message: " << e.what());
    }
}

PlanDesc small_desc() {
    PlanDesc d;
    d.hidden_size = 64;
    d.intermediate_size = 64;
    d.num_experts = 4;
    d.top_k = 8;
    return d;
}

constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();

}  // namespace

BOOST_AUTO_TEST_CASE(helper_reports_overflow_naming_the_argument) {
    BOOST_TEST(checked_mul<std::int64_t>(3, 4, "x") == 12);
    expect_error([] { checked_mul<std::int64_t>(kI64Max, 2, "num_tokens"); }, Status::invalid_argument,
                 "num_tokens");
    expect_error([] { checked_mul<std::size_t>(std::size_t{1} << 40, std::size_t{1} << 40, "args->rows"); },
                 Status::invalid_argument, "args->rows");
    expect_error([] { checked_add<std::size_t>(std::numeric_limits<std::size_t>::max(), 1, "bytes"); },
                 Status::invalid_argument, "bytes");
    BOOST_TEST(checked_bytes({2, 3, 4}, "x") == 24u);
    expect_error([] { checked_bytes({-1, 3}, "num_tokens"); }, Status::invalid_argument, "num_tokens");
    expect_error([] { checked_bytes({kI64Max, kI64Max}, "num_tokens"); }, Status::invalid_argument, "num_tokens");
    BOOST_TEST(checked_rows(1000, 8, "num_tokens") == 8000);
    expect_error([] { checked_rows(-1, 8, "num_tokens"); }, Status::invalid_argument, "num_tokens");
    expect_error([] { checked_rows(std::int64_t{1} << 29, 8, "num_tokens"); }, Status::invalid_argument,
                 "num_tokens");
    expect_error([] { checked_rows(kI64Max, 64, "desc->tokens_hint"); }, Status::invalid_argument,
                 "desc->tokens_hint");
}

// The size queries' arithmetic: T is validated as forward and backward validate it.
BOOST_AUTO_TEST_CASE(plan_layout_validates_tokens) {
    const PlanDesc d = small_desc();
    for (bool gathered : {false, true}) {
        PlanLayout ok(d, 1000, gathered);
        BOOST_TEST(ok.rows == 8000);
        BOOST_TEST(ok.saved_bytes > 0u);
        BOOST_TEST(ok.workspace_bytes > 0u);
        PlanLayout zero(d, 0, gathered);
        BOOST_TEST(zero.rows == 0);
        for (std::int64_t T : {std::int64_t{-1}, std::numeric_limits<std::int64_t>::min()})
            expect_error([&] { PlanLayout(d, T, gathered); }, Status::invalid_argument, "num_tokens");
        // T·k just past 2^31-1, T·k overflowing int64 (0.3.0: signed overflow, UB).
        for (std::int64_t T : {std::int64_t{1} << 28, kI64Max / 4, kI64Max})
            expect_error([&] { PlanLayout(d, T, gathered); }, Status::invalid_argument, "num_tokens");
        expect_error([&] { PlanLayout(d, kI64Max, gathered, "args->num_tokens"); }, Status::invalid_argument,
                     "args->num_tokens");
    }
}

// H and I have no upper bound in a desc: with the largest T their byte counts overflow size_t.
BOOST_AUTO_TEST_CASE(plan_layout_sizes_are_checked) {
    PlanDesc d = small_desc();
    d.hidden_size = std::int64_t{1} << 60;
    expect_error([&] { PlanLayout(d, (std::int64_t{1} << 28) - 1, false); }, Status::invalid_argument,
                 "num_tokens");
    d = small_desc();
    d.intermediate_size = std::int64_t{1} << 61;
    expect_error([&] { PlanLayout(d, 1 << 20, true); }, Status::invalid_argument, "num_tokens");
}

// layer_specs (plan creation, warmup): tokens_hint·k overflowed before validation on 0.3.0.
BOOST_AUTO_TEST_CASE(tokens_hint_overflow_names_the_field) {
    PlanDesc d = small_desc();
    d.tokens_hint = kI64Max;
    expect_error([&] { layer_specs(d, Config{}, 90); }, Status::invalid_argument, "desc->tokens_hint");
    d.tokens_hint = std::int64_t{1} << 31;
    expect_error([&] { layer_specs(d, Config{}, 90); }, Status::invalid_argument, "desc->tokens_hint");
    d.tokens_hint = 4096;
    BOOST_CHECK_NO_THROW(layer_specs(d, Config{}, 90));
}
