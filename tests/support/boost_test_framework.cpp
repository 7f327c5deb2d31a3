// The Boost.Test framework, compiled once for every test executable. It is Boost's header-only
// variant (the GPU machine has Boost's headers but not its compiled library); included in each
// test file it cost every file a full compile of the framework. Test files include
// <boost/test/unit_test.hpp> only. No main here: the cpu tests take boost_test_main.cpp's, the
// gpu tests their own (gpu_main.hpp). BOOST_TEST_ALTERNATIVE_INIT_API comes from
// tests/meson.build for every test file too: it changes unit_test_main()'s signature.
#define BOOST_TEST_NO_MAIN
#include <boost/test/included/unit_test.hpp>
