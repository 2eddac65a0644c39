// Lint configuration (ESLint flat config): typescript-eslint's recommended rules, without
// type information so `npm run lint` stays fast. Formatting belongs to Prettier, so
// eslint-config-prettier (last) switches off every rule that would argue with it.
import tseslint from 'typescript-eslint';
import prettierConfig from 'eslint-config-prettier';

export default tseslint.config(
  {
    ignores: ['node_modules/', '**/dist/', 'test/artifacts/', 'data/', 'coverage/'],
  },
  {
    linterOptions: { reportUnusedDisableDirectives: 'error' },
  },
  tseslint.configs.recommended,
  {
    rules: {
      // A leading underscore marks a name that is there on purpose but not read: an Express
      // error handler's `_next` (Express counts the arguments), or a field dropped from an
      // object by destructuring it out of a rest (`const { code: _code, ...details } = x`).
      '@typescript-eslint/no-unused-vars': [
        'error',
        {
          argsIgnorePattern: '^_',
          varsIgnorePattern: '^_',
          caughtErrorsIgnorePattern: '^_',
          destructuredArrayIgnorePattern: '^_',
        },
      ],
    },
  },
  {
    files: ['test/**/*.ts', '**/*.test.ts', '**/*.test.tsx'],
    rules: {
      // Tests read API answers and wire frames as untyped JSON (`t.api()` bodies, protocol
      // frames) and assert on them field by field; the assertions are the type check there.
      // Production code keeps the rule.
      '@typescript-eslint/no-explicit-any': 'off',
    },
  },
  prettierConfig,
);
