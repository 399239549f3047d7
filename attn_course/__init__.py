"""attn_course: the helper package of a hands-on course that derives self-attention.

Each notebook imports exactly what it introduced from here: reference implementations
(`attn_course.reference`), autograder checks (`attn_course.checks`), plots and widgets.
"""

__version__ = "0.1.0"
