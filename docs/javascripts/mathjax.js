// MathJax 2.7 (copied into the site by docs/hooks.py from jupyter-server-mathjax): typeset the
// \( … \) and \[ … \] spans pymdownx.arithmatex (generic mode) writes, and nothing else; use the
// STIX web fonts that ship with this copy (the TeX fonts are not in it).
window.MathJax = {
  tex2jax: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
    ignoreClass: ".*|",
    processClass: "arithmatex"
  },
  "HTML-CSS": { availableFonts: [], preferredFont: null, webFont: "STIX-Web", imageFont: null },
  showMathMenu: false,
  messageStyle: "none"
};
