"""Configuration: the one typed config object and its YAML loading, the data files shipped in the
package, the error tree, the redactor every published text passes."""
