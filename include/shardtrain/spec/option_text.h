// What options print besides their own errors, for every command's parser: --help's defaults
// as one types them, an option's value as text, and the one line for an unknown option (the
// nearest option, or shardtrain's name for a flag that PyTorch or Hugging Face's Trainer uses).
#pragma once
#include <boost/any.hpp>
#include <boost/program_options.hpp>
#include <string>

namespace shardtrain::spec {

namespace po = boost::program_options;

// A double option with its default shown in --help as one types it (1e-4, 0.95), not as Boost's
// lexical_cast prints it (0.0001000000000000000048). Every double option with a default uses it.
po::typed_value<double>* real(double* target, double default_value);
// A parsed option's value as one would type it (doubles as runtime::round_trip writes them); ""
// for a type that no option has.
std::string option_value_text(const boost::any& v);
// One line for an unknown option: the command's nearest option, or shardtrain's equivalent of
// a PyTorch / Hugging Face Trainer flag. config: the --config file it was read from, or "".
std::string unknown_option_message(const std::string& typed, const po::options_description& all,
                                   const std::string& config);

}  // namespace shardtrain::spec
