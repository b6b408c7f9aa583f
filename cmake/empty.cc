// A binary made only of alwayslink libraries still needs one source file for
// CMake.
