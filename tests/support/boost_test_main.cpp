// main() of a cpu test executable: the one the header-only Boost.Test would generate. The test
// file's BOOST_TEST_MODULE defines init_unit_test(), which names the master suite.
#include <boost/test/unit_test.hpp>

#ifndef BOOST_TEST_ALTERNATIVE_INIT_API
#error "tests/meson.build defines BOOST_TEST_ALTERNATIVE_INIT_API for every test file"
#endif

bool init_unit_test();

int main(int argc, char *argv[]) { return boost::unit_test::unit_test_main(&init_unit_test, argc, argv); }
