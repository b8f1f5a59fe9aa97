"""Global flags of your own: add them here and read them from ``args`` anywhere.

    def get_custom_args(parser):
        group = parser.add_argument_group("custom")
        group.add_argument("--my_flag", type=int, default=0, help="...")
"""


def get_custom_args(parser):
    """Called by options.options while building the parser; add global flags to ``parser``."""
    return parser
