// whoami_server: see whoami_server_main.cc.
#include "whoami_server_main.h"

int main(int argc, char** argv) { return drover::examples::WhoamiServerMain(argc, argv); }
