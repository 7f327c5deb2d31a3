// An installed-moejit consumer in C++: the RAII wrappers by their documented include path.
#include <moejit/moejit.hpp>

#include <iostream>

int main() {
    try {
        moejit::api::Context ctx;
        std::cout << "C++ consumer: moejit " << moejit_version() << ", context on " << ctx.arch() << "\n";
    } catch (const moejit::api::Exception &e) {
        if (e.status() != MOEJIT_ERROR_NO_DRIVER && e.status() != MOEJIT_ERROR_NO_DEVICE) {
            std::cerr << e.what() << "\n";
            return 1;
        }
        std::cout << "C++ consumer: moejit " << moejit_version() << ", no GPU here (" << e.what() << ")\n";
    }
    return 0;
}
