// moejit-compile-worker: compiles one kernel with NVRTC for the library that started it
// (runtime/compile_worker.hpp): the request on stdin, the answer on stdout.
#include <cstdio>

#include "runtime/compile_worker.hpp"

int main() { return moejit::compile_worker_main(stdin, stdout); }
